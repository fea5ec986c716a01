"""Train pronghorn for a fixed wall time (then Ctrl-C: it checkpoints and stops) and read its steady-state rate."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TooLittleLogged(SystemExit):
    """A run wrote fewer metrics rows than a rate needs. A SystemExit, so a script that does not catch it stops
    with its message; the GPU check catches it, notes the run as failed and goes on to the next."""


def train_for(args: list[str], seconds: float, logdir: str, at: float = 0.0, call: Callable[[int], object] | None = None) -> list[dict[str, str]]:
    """Run `pronghorn train *args` from this checkout for `seconds`, stop it as Ctrl-C would; its metrics rows.

    call: run with the training process's pid `at` seconds in (benchmarks/pinning.py places its processes)."""
    cmd = [sys.executable, "-m", "pronghorn.cli", "train", *args, "--total-frames", "10G", "--stop-at-return", "1e12"]
    cmd += ["--logdir", logdir, "--no-progress", "--log-interval", "2"]
    print("pronghorn:", " ".join(cmd[3:]), flush=True)
    # Its console lines go to a file, not a pipe: nobody reads a pipe while it trains, and once the pipe's
    # 64 KiB were full (about 22 minutes of a line every 2 s) its next log line blocked the learner for good.
    err_path = logdir.rstrip("/") + ".stderr.txt"  # beside the logdir, which pronghorn creates
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, text=True, cwd=ROOT)  # this checkout's pronghorn
        try:  # a call that raises (its process gone, placement refused) must not leave the run training
            if call is not None:
                time.sleep(at)
                call(proc.pid)
            time.sleep(seconds - (at if call is not None else 0.0))
            if proc.poll() is not None:
                print(f"  pronghorn exited by itself (exit {proc.returncode}) before {seconds:.0f} s: see {err_path}", flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)  # as Ctrl-C: checkpoint, stop the actors, exit (SIGINT is ignored in a background job)
            proc.wait(timeout=180)
    with open(err_path) as f:
        err = f.read()
    path = os.path.join(logdir, "metrics.csv")
    rows = []
    if os.path.exists(path):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    if len(rows) < 4:
        raise TooLittleLogged(f"pronghorn logged too little to measure (exit {proc.returncode}):\n{err[-3000:]}")
    return rows


def steady_fps(rows: list[dict[str, str]]) -> float:
    """Training frames/s over the run, the first quarter (start-up) skipped."""
    steady = rows[len(rows) // 4 :]
    return (float(steady[-1]["frames"]) - float(steady[0]["frames"])) / (float(steady[-1]["time"]) - float(steady[0]["time"]))
