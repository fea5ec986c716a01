"""Train pronghorn for a fixed wall time (then Ctrl-C: it checkpoints and stops) and read its steady-state rate."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train_for(args: list[str], seconds: float, logdir: str) -> list[dict[str, str]]:
    """Run `pronghorn train *args` from this checkout for `seconds`, stop it as Ctrl-C would; its metrics rows."""
    cmd = [sys.executable, "-m", "pronghorn.cli", "train", *args, "--total-frames", "10G", "--stop-at-return", "1e12"]
    cmd += ["--logdir", logdir, "--no-progress", "--log-interval", "2"]
    print("pronghorn:", " ".join(cmd[3:]), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)  # this checkout's pronghorn
    time.sleep(seconds)
    proc.send_signal(signal.SIGTERM)  # as Ctrl-C: checkpoint, stop the actors, exit (SIGINT is ignored in a background job)
    _, err = proc.communicate(timeout=180)
    path = os.path.join(logdir, "metrics.csv")
    rows = []
    if os.path.exists(path):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    if len(rows) < 4:
        raise SystemExit(f"pronghorn logged too little to measure (exit {proc.returncode}):\n{err[-3000:]}")
    return rows


def steady_fps(rows: list[dict[str, str]]) -> float:
    """Training frames/s over the run, the first quarter (start-up) skipped."""
    steady = rows[len(rows) // 4 :]
    return (float(steady[-1]["frames"]) - float(steady[0]["frames"])) / (float(steady[-1]["time"]) - float(steady[0]["time"]))
