"""Does pinning pronghorn's processes to cores speed up training? Alternates placements, prints frames/s.

  .venv/bin/python benchmarks/pinning.py                                # CartPole's defaults, 3 rounds
  .venv/bin/python benchmarks/pinning.py --rounds 4 -- --env MinAtar/Breakout-v0

Each run trains for --seconds, is placed --settle seconds in (every thread of the process: a thread's
affinity is its own, so the learner's staging and logging threads are moved too), and reads frames/s over
its metrics rows after the first quarter (timed_run.steady_fps). Placements, on the first two cores this process may use:
  none          the scheduler's choice (what pronghorn does)
  actors-split  actor i on core i % 2, the learner free to use both
  split         the learner alone on one core, every actor on the other
Linux only (sched_setaffinity).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import psutil
from timed_run import steady_fps, train_for

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
    found: list[int] = []
    with tempfile.TemporaryDirectory(prefix=f"pin-{placement}-") as tmp:  # the run's logdir and stderr file
        rows = train_for(
            args.train, args.seconds, os.path.join(tmp, "run"), args.settle, lambda pid: found.append(place(placement, psutil.Process(pid), cores))
        )
    return steady_fps(rows), found[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="wall time of each run")
    parser.add_argument("--settle", type=float, default=4.0, help="seconds before placing (the actors have started)")
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
