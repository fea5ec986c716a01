"""Where the learner process's time goes in a real run: CPU and wall time per update of each part.

  .venv/bin/python benchmarks/learner_parts.py                                   # CartPole, the defaults
  .venv/bin/python benchmarks/learner_parts.py --frames 2000000 -- --num-actors 1
  .venv/bin/python benchmarks/learner_parts.py --frames 500000 -- --env MinAtar/Breakout-v0
  .venv/bin/python benchmarks/learner_parts.py --skip 300 --frames 30000000 -- --num-actors 1 --envs-per-actor 512
      --batch-size 512 --learner-precision bf16 --compile-learner      # CartPole's best, compiling left out

Runs `pronghorn train` in this process (actors in their own, as always) with timers around the learner
thread's parts: the update (`Learner.step`), taking the next batch (`Staging.next`: mostly waiting for
actors on CPU), publishing the weights, reading the batch's finished games, logging them, adding them to the
recent returns and summing the update's metrics. It prints, per update, the thread's CPU time
(time.thread_time: what the part cost) and wall time (what it took, waits and preemption included),
Python's garbage collections and their CPU time, the rest of the loop's CPU time (metrics rows,
checkpoints, the loop itself; counted to the end of the last timed part, so the run's shutdown, its final
checkpoint and curve, is left out) and the process's context switches. The update's CPU time can be set beside `benchmarks/throughput.py`'s learner component (the
same update alone, back to back on an idle core), but on the 2-core development machine that update alone
differed by up to 1.7x from one process to the next (docs/throughput_log.md, "Where the defaults' learner time goes"):
compare several runs of each, not one.
The run stops at --frames, not at the env's reward threshold. --skip N leaves out the first N updates and the
time before the end of the Nth (start-up; a compiled learner compiles in its second update, for 5-30 s).
"""

from __future__ import annotations

import argparse
import collections
import gc
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import pronghorn.cli as cli
import pronghorn.training as training
from pronghorn.learner import Learner
from pronghorn.logs import Logger
from pronghorn.runtime.shm import WeightStore
from pronghorn.staging import Staging
from pronghorn.stats import LevelStats

cpu: collections.Counter[str] = collections.Counter()
wall: collections.Counter[str] = collections.Counter()
calls: collections.Counter[str] = collections.Counter()
gc_start = [0.0]  # the running collection's start (thread CPU time)
gc_runs: list[tuple[float, int, float]] = []  # each collection: its end (wall), generation, CPU seconds
skip = [0]  # updates left to leave out (start-up: a compiled learner compiles in its second update)
start = [0.0, 0.0]  # the learner thread's CPU time and the wall time where counting began
end = [0.0, 0.0]  # the same at the end of the last timed part: the run's shutdown (final checkpoint, curve) is left out


def restart_counts() -> None:
    for counter in (cpu, wall, calls):
        counter.clear()
    gc_runs.clear()
    start[:] = [time.thread_time(), time.perf_counter()]


def timed(owner: Any, name: str, key: str) -> None:
    """Replace owner.name by a wrapper that adds its thread CPU time and wall time to the counters."""
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0, w0 = time.thread_time(), time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            cpu[key] += time.thread_time() - c0
            wall[key] += time.perf_counter() - w0
            calls[key] += 1
            end[:] = [time.thread_time(), time.perf_counter()]
            if key == "update" and skip[0] and calls[key] == skip[0]:
                skip[0] = 0
                restart_counts()

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--frames", type=int, default=3_000_000, help="frames to train (the run's --total-frames)")
    parser.add_argument("--skip", type=int, default=0, help="leave out the first SKIP updates (start-up, compilation)")
    parser.add_argument("train_args", nargs="*", help="more `pronghorn train` flags, after --")
    args = parser.parse_args()

    timed(Learner, "step", "update")
    timed(Staging, "next", "next batch")
    timed(WeightStore, "publish", "publish weights")
    timed(training, "finished_episodes", "finished games")
    timed(Logger, "episodes", "log games")
    timed(LevelStats, "add", "game stats")
    timed(training._Interval, "add", "metrics sums")
    skip[0] = args.skip

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0] = time.thread_time()
        elif threading.current_thread() is threading.main_thread():  # the learner thread's, not a helper thread's
            gc_runs.append((time.perf_counter(), info["generation"], time.thread_time() - gc_start[0]))

    gc.callbacks.append(on_gc)
    with tempfile.TemporaryDirectory() as logdir:
        argv = ["train", "--env", args.env, "--total-frames", str(args.frames), "--stop-at-return", "1e12"]
        argv += ["--logdir", logdir, "--no-progress", *args.train_args]
        restart_counts()
        code = cli.main(argv)
        thread_cpu, elapsed = end[0] - start[0], end[1] - start[1]
    if code or not calls["update"]:
        sys.exit(code or 1)
    n = calls["update"]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    counted = f"after the first {args.skip} updates" if args.skip else "start-up included"
    print(f"\n{n} updates in {elapsed:.1f} s; the learner thread ({counted}): {thread_cpu / n * 1e6:,.0f} us CPU per update, {elapsed / n * 1e6:,.0f} us wall")
    parts = ("update", "next batch", "publish weights", "finished games", "log games", "game stats", "metrics sums")
    for key in parts:
        k = max(calls[key], 1)
        print(f"  {key:16s} {cpu[key] / k * 1e6:8,.0f} us CPU  {wall[key] / k * 1e6:8,.0f} us wall  per call ({calls[key]} calls)")
    # Those before the last timed part ended: the shutdown's (its curve, its final checkpoint) are not the loop's.
    in_loop = [(generation, seconds) for at, generation, seconds in gc_runs if at <= end[1]]
    by_generation = collections.Counter(generation for generation, _ in in_loop)
    gc_cpu = sum(seconds for _, seconds in in_loop)
    print(f"  garbage collections {dict(sorted(by_generation.items()))}: {gc_cpu / n * 1e6:,.0f} us CPU per update")
    # A collection can run inside a timed part, so the rest may read a little low.
    rest = thread_cpu - sum(cpu[key] for key in parts) - gc_cpu
    print(f"  the rest           {rest / n * 1e6:8,.0f} us CPU per update (the loop itself, metrics rows, checkpoints)")
    print(f"  context switches per update: {usage.ru_nvcsw / n:.2f} voluntary, {usage.ru_nivcsw / n:.2f} involuntary")


if __name__ == "__main__":  # actors are spawned: they import this file and must not train
    main()
