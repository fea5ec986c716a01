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

from learner_layouts import module_at, settings_to_time, timing_arguments, update_table
from throughput import Components, setting_config

import pronghorn.learner as learner_module

VARIANTS = ["as it is", "Optimizer.step"]
DEFAULT = ["cartpole", "cartpole-best-bf16", "cartpole-best-bf16-compiled", "minatar-breakout-best-bf16"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    timing_arguments(parser)
    parser.add_argument("--before", help="also time pronghorn/learner.py as it was at this git revision")
    args = parser.parse_args()
    settings = settings_to_time(parser, args, DEFAULT)
    try:
        old = module_at(args.before, "pronghorn/learner.py") if args.before else None
    except ValueError as exc:
        parser.error(str(exc))
    own_step = learner_module.optimizer_step

    def build(setting: str, name: str) -> Components:
        c = Components(setting_config(setting, 1))
        if old is not None and name == args.before:
            c.learner = old.Learner(c.learner.cfg, c.learner.agent, c.learner.frames_per_step)
        return c

    def arrange(name: str) -> None:
        learner_module.optimizer_step = own_step if name == "as it is" else lambda optimizer, flat: optimizer.step()

    try:
        update_table(settings, VARIANTS + ([args.before] if args.before else []), args.rounds, args.updates, build, arrange)
    finally:
        learner_module.optimizer_step = own_step


if __name__ == "__main__":
    main()
