"""Does a component run slower while the other core is busy? A check of the component limit's premise.

`throughput.py` times each component on one thread while the rest of the machine idles, then takes the
limit as if every core ran at that speed at once. On a virtual machine two vCPUs can share one physical
core (hyperthreads) or its caches and memory bandwidth, and then each would run slower when both are busy.
This times the components of a setting (`throughput.measure_components`) in a process pinned to CPU 0,
in turns, with CPU 1:
  idle     nothing else running
  same     a second process timing the same components on CPU 1 at the same time (its figures too)
  spin     a pure-Python loop on CPU 1
and prints core-microseconds per frame of each component and their sum, per round. If "same" and "spin"
read like "idle", the limit's premise holds on this machine.

  .venv/bin/python benchmarks/corun.py --only cartpole --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from throughput import SETTINGS, measure_components, setting_config

from pronghorn.runtime.tuning import limit_threads, tune_malloc


def components(setting: str, cpu: int, seconds: float, results: Any = None) -> dict[str, float]:
    """Core-µs per frame of the setting's components, timed on `cpu` (sent to `results` when given)."""
    os.sched_setaffinity(0, {cpu})
    tune_malloc()
    limit_threads(1)
    costs, _ = measure_components(setting_config(setting, num_actors=2), seconds)
    micros = {name: value * 1e6 for name, value in costs.items()}
    if results is not None:
        results.put(micros)
    return micros


def spin(cpu: int, stop: Any) -> None:
    os.sched_setaffinity(0, {cpu})
    x = 0
    while not stop.is_set():
        for _ in range(10_000):
            x += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append", help="settings to time (default: cartpole)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of idle / same / spin, in turns")
    parser.add_argument("--seconds", type=float, default=4.0, help="minimum seconds per component timing")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds is {args.rounds}: use 1 or more")
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        parser.error("needs CPUs 0 and 1 (this process may run on fewer): run it on a machine with two or more cores")
    ctx = mp.get_context("spawn")  # a fresh interpreter per timing, as the actors are started
    for setting in args.only or ["cartpole"]:
        print(f"{setting}: core-us per frame on CPU 0 (env / inference / learner = sum, and the limit on 2 cores)")
        for rnd in range(1, args.rounds + 1):
            rows = {"idle": components(setting, 0, args.seconds)}
            results = ctx.Queue()
            other = ctx.Process(target=components, args=(setting, 1, args.seconds, results), daemon=True)
            other.start()
            rows["same"] = components(setting, 0, args.seconds)
            rows["same (CPU 1)"] = results.get(timeout=600)  # the other process's own timing
            other.join(timeout=60)
            stop = ctx.Event()
            spinner = ctx.Process(target=spin, args=(1, stop), daemon=True)
            spinner.start()
            try:
                rows["spin"] = components(setting, 0, args.seconds)
            finally:
                stop.set()
                spinner.join(timeout=10)
            for name, micros in rows.items():
                total = sum(micros.values())
                parts = " / ".join(f"{micros[k]:.2f}" for k in ("env", "inference", "learner"))
                print(f"  round {rnd} {name:13}  {parts} = {total:.2f}  limit {2e6 / total:,.0f} fps")


if __name__ == "__main__":
    main()
