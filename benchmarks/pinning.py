"""Does pinning pronghorn's processes to cores speed up training? Alternates placements, prints frames/s.

  .venv/bin/python benchmarks/pinning.py                                # CartPole's defaults, 3 rounds
  .venv/bin/python benchmarks/pinning.py --rounds 4 -- --env MinAtar/Breakout-v0

Each run trains for --seconds, is placed --settle seconds in (every thread of the process: a thread's
affinity is its own, so the learner's staging and logging threads are moved too), and reads frames/s
between --skip seconds and its last metrics row. Placements, on the first two cores this process may use:
  none          the scheduler's choice (what pronghorn does)
  actors-split  actor i on core i % 2, the learner free to use both
  split         the learner alone on one core, every actor on the other
Linux only (sched_setaffinity).
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLACEMENTS = ("none", "actors-split", "split")


def pin(pid: int, cores: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that ended since the listing
            pass


def place(placement: str, learner: psutil.Process, cores: list[int]) -> int:
    """Pins the learner and its actor processes; returns how many actors it found."""
    actors = [c for c in learner.children(recursive=True) if "resource_tracker" not in " ".join(c.cmdline())]
    if placement == "split":
        pin(learner.pid, {cores[0]})
        for actor in actors:
            pin(actor.pid, {cores[1]})
    elif placement == "actors-split":
        for i, actor in enumerate(actors):
            pin(actor.pid, {cores[i % 2]})
    return len(actors)


def run(placement: str, args: argparse.Namespace, cores: list[int]) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix=f"pin-{placement}-") as logdir:
        cmd = [sys.executable, "-m", "pronghorn.cli", "train", *args.train, "--total-frames", "10G", "--stop-at-return", "1e12"]
        cmd += ["--logdir", logdir, "--no-progress", "--log-interval", "2"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        try:
            time.sleep(args.settle)
            actors = place(placement, psutil.Process(proc.pid), cores)
            time.sleep(args.seconds - args.settle)
        finally:
            proc.send_signal(signal.SIGTERM)  # as Ctrl-C: checkpoint, stop the actors, exit
            proc.wait(timeout=180)
        with open(os.path.join(logdir, "metrics.csv"), newline="") as f:
            points = [(float(r["time"]), float(r["frames"])) for r in csv.DictReader(f)]
    start = next(p for p in points if p[0] >= args.skip)
    end = points[-1]
    return (end[1] - start[1]) / (end[0] - start[0]), actors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="wall time of each run")
    parser.add_argument("--settle", type=float, default=4.0, help="seconds before placing (the actors have started)")
    parser.add_argument("--skip", type=float, default=8.0, help="frames/s counts from this many seconds in")
    parser.add_argument("train", nargs="*", help="pronghorn train's flags, after --")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("pinning.py needs two cores to place processes on")
    rates: dict[str, list[float]] = {p: [] for p in PLACEMENTS}
    for r in range(args.rounds):
        for placement in PLACEMENTS:
            fps, actors = run(placement, args, cores)
            rates[placement].append(fps)
            print(f"round {r}: {placement:12s} {fps:10,.0f} frames/s ({actors} actor processes)", flush=True)
    for placement, fps in rates.items():
        print(f"{placement:12s} median {sorted(fps)[len(fps) // 2]:10,.0f} frames/s over {len(fps)} runs")


if __name__ == "__main__":
    main()
