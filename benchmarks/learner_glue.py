"""The learner's work around its forward and backward pass, each change against the code it replaced.

  .venv/bin/python benchmarks/learner_glue.py                                  # the default settings
  .venv/bin/python benchmarks/learner_glue.py --only cartpole-best-bf16-compiled --rounds 12

Times a whole learner update (`Learner.step` on the throughput harness's batch, thread-CPU ms) of each setting
in variants, each its own learner, in turns on one pinned CPU (`learner_layouts.in_turns`):
  as it is          RMSProp's step as its four ops on the flat weights (`flat.optimizer_step`)
  Optimizer.step    the same step through torch.optim's `Optimizer.step`, as before
  REV               with --before REV: `pronghorn/learner.py` as it was at git revision REV (the rest of
                    the package as it is), e.g. the commit before a change to the learner's loop
and prints each variant's median and lowest ms per update. Compiled settings are timed too (the step runs
outside the compiled pass); a compiled learner compiles in its first timing, which is not counted.

  .venv/bin/python benchmarks/learner_glue.py --before 44b4dc5 --only cartpole-best-bf16-compiled
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
from types import ModuleType

from learner_layouts import in_turns, thread_ms
from throughput import SETTINGS, Components, setting_config

import pronghorn.learner as learner_module
from pronghorn.runtime.tuning import limit_threads, tune_malloc

VARIANTS = ["as it is", "Optimizer.step"]
DEFAULT = ["cartpole", "cartpole-best-bf16", "cartpole-best-bf16-compiled", "minatar-breakout-best-bf16"]
TYPICAL = {"cartpole": 150, "cartpole-best-bf16": 30, "cartpole-best-bf16-compiled": 30, "minatar-breakout-best-bf16": 12}


def learner_at(rev: str) -> ModuleType:
    """pronghorn/learner.py as it was at git revision `rev`, imported as a module of its own."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shown = subprocess.run(["git", "-C", root, "show", f"{rev}:pronghorn/learner.py"], capture_output=True, text=True)
    if shown.returncode != 0:
        raise ValueError(f"--before {rev}: git found no pronghorn/learner.py there; give a commit of this repository")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(shown.stdout)
    spec = importlib.util.spec_from_file_location(f"learner_at_{rev}", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile looks the compiled function's module up by name
    atexit.register(os.unlink, f.name)  # and its source, while it traces
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", help="a setting of benchmarks/throughput.py (repeatable)")
    parser.add_argument("--rounds", type=int, default=10, help="timings of each variant (default 10)")
    parser.add_argument("--updates", type=int, default=0, help="updates per timing (default: about 0.2 s of each default setting's updates, else 10)")
    parser.add_argument("--before", help="also time pronghorn/learner.py as it was at this git revision")
    parser.add_argument("--cpu", type=int, default=min(1, (os.cpu_count() or 1) - 1), help="the CPU to pin this process to (default 1)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds is {args.rounds}: it must be at least 1")
    settings = args.only or DEFAULT
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        parser.error(f"--only {unknown[0]}: not a setting of benchmarks/throughput.py; choose from {', '.join(SETTINGS)}")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    tune_malloc()  # as the learner process runs
    limit_threads(1)
    variants = VARIANTS + ([args.before] if args.before else [])
    try:
        old = learner_at(args.before) if args.before else None
    except ValueError as exc:
        parser.error(str(exc))
    own_step = learner_module.optimizer_step
    print(f"A learner update (thread-CPU ms): median (lowest) of {args.rounds} timings of N updates, the variants in turns")
    print("| setting (N) | " + " | ".join(variants) + " |")
    print("|---|" + "---|" * len(variants))
    for setting in settings:
        learners = {name: Components(setting_config(setting, 1)) for name in variants}
        if old is not None:
            c = learners[args.before]
            c.learner = old.Learner(c.learner.cfg, c.learner.agent, c.learner.frames_per_step)
        n = args.updates or TYPICAL.get(setting, 10)

        def timing(name: str, learners: dict[str, Components] = learners, n: int = n) -> float:
            c = learners[name]
            learner_module.optimizer_step = own_step if name == "as it is" else lambda optimizer, flat: optimizer.step()
            return thread_ms(n, c.learner.step, c.batch)

        times = in_turns(variants, timing, args.rounds)
        learner_module.optimizer_step = own_step
        cells = [f"{statistics.median(t):.2f} ({min(t):.2f})" for t in times.values()]
        print(f"| {setting} ({n}) | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
