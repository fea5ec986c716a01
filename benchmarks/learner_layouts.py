"""Two memory layouts of the learner's products, each against the layout it replaced, on one pinned CPU.

  .venv/bin/python benchmarks/learner_layouts.py                      # every part, the default settings
  .venv/bin/python benchmarks/learner_layouts.py --part update --only cartpole-best-bf16 --rounds 12

`--part linear` times one layer of 64 units, forward and backward at a learner's 10 752 rows, as nn.Linear and
as `models.NarrowLinear` (the weight multiplied as a row-major [in, out] copy), for 4 to 128 inputs, in bf16
(autocast) and fp32: where NarrowLinear's `NARROW` comes from.

`--part update` times a whole learner update (`Learner.step` on the throughput harness's batch) of each setting
in four variants: the code as it is, with the heads' product row-major ([N, A+1], as before
`models.both_heads` wrote it action-major on CPU), with the MLP's first layer a plain nn.Linear, and with both
of those. Each variant has its own learner; the variants take turns, `--updates` updates per timing and
`--rounds` timings each, the order reversed every round, since this machine's speed drifts by more than
the differences within minutes. It prints each variant's median and lowest thread-CPU ms per update. Settings
with --compile-learner are left out: the heads' layout is read when the update is traced.

`--part vtrace` times V-trace from logits (`vtrace.from_logits`, 20 x 512 steps, the target logits action-major
as the learner's on CPU) eager and compiled, with the behaviour logits row-major (as the actors write them) and
as a view of an action-major copy (what every learner on CPU passes, `Learner._action_major`), for 2, 3
and 6 actions, in alternated timings; `--part all` runs the three parts.
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
import time
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F
from throughput import SETTINGS, Components, setting_config
from torch import nn

import pronghorn.models as models
from pronghorn.runtime.tuning import limit_threads, tune_malloc

ROWS = 10_752  # CartPole's best batch: 21 rows of 512 columns


def row_major_heads(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The heads' product as it was: [N, A+1], the logits a column slice with a stride of A+1."""
    both = F.linear(x, weight, bias)
    return both[:, :-1], both[:, -1]


def thread_ms(calls: int, fn: Callable[..., object], *args: object) -> float:
    """Thread-CPU ms per call of fn(*args)."""
    start = time.thread_time()
    for _ in range(calls):
        fn(*args)
    return (time.thread_time() - start) / calls * 1e3


def pass_through(layer: nn.Linear, x: torch.Tensor, grad: torch.Tensor, bf16: bool) -> None:
    layer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = layer(x)
    out.backward(grad.to(out.dtype))


def linear_part(rounds: int) -> None:
    print(f"One layer of 64 units, forward and backward at {ROWS} rows: thread-CPU µs, median of {rounds} alternated timings")
    print("| inputs | bf16 nn.Linear | bf16 NarrowLinear | fp32 nn.Linear | fp32 NarrowLinear |")
    print("|---|---|---|---|---|")
    for inputs in (4, 8, 16, 32, 128):
        row = []
        for bf16 in (True, False):
            torch.manual_seed(0)
            x, grad = torch.randn(ROWS, inputs), torch.randn(ROWS, 64)
            layers = [nn.Linear(inputs, 64), models.NarrowLinear(inputs, 64)]
            layers[1].load_state_dict(layers[0].state_dict())

            times: list[list[float]] = [[], []]
            for r in range(rounds):
                for i in (0, 1) if r % 2 == 0 else (1, 0):
                    pass_through(layers[i], x, grad, bf16)  # warm
                    times[i].append(thread_ms(40, pass_through, layers[i], x, grad, bf16) * 1e3)
            row += [f"{statistics.median(t):,.0f}" for t in times]
        print(f"| {inputs} | " + " | ".join(row) + " |", flush=True)


def vtrace_part(rounds: int) -> None:
    from pronghorn import vtrace

    def returns(*args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = vtrace.from_logits(*args)
        return out.vs, out.pg_advantages, out.target_action_log_probs

    compiled = torch.compile(returns, dynamic=False, options={"cpp_wrapper": True})
    t, b = 20, 512
    print(f"V-trace from logits at {t} x {b} steps: thread-CPU µs, median of {rounds} alternated timings")
    print("| actions | eager, behaviour row-major | eager, action-major | compiled, row-major | compiled, action-major |")
    print("|---|---|---|---|---|")
    for a in (2, 3, 6):
        g = torch.Generator().manual_seed(a)
        row_major = torch.randn(t, b, a, generator=g)
        action_major = row_major.permute(2, 0, 1).contiguous().permute(1, 2, 0)  # the same values
        target = torch.randn(a, t, b, generator=g).permute(1, 2, 0)  # as models.both_heads writes them on CPU
        rest = (
            torch.randint(0, a, (t, b), generator=g),
            0.99 * (torch.rand(t, b, generator=g) > 0.01).float(),
            torch.rand(t, b, generator=g),
            torch.randn(t, b, generator=g),
            torch.randn(b, generator=g),
        )
        variants = {
            f"{mode}, {layout}": (fn, behaviour)
            for mode, fn in (("eager", returns), ("compiled", compiled))
            for layout, behaviour in (("row-major", row_major), ("action-major", action_major))
        }
        reference = returns(row_major, target, *rest)
        for fn, behaviour in variants.values():
            assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(fn(behaviour, target, *rest), reference))  # and compiles it

        def timing(name: str, variants: dict = variants, args: tuple = (target, *rest)) -> float:
            fn, behaviour = variants[name]
            return thread_ms(200, fn, behaviour, *args) * 1e3

        times = in_turns(list(variants), timing, rounds)
        print(f"| {a} | " + " | ".join(f"{statistics.median(v):,.0f}" for v in times.values()) + " |", flush=True)


def plain_first_layer(c: Components) -> Components:
    """c with its MLP's first layer multiplied as nn.Linear does (the same parameters), if it is a NarrowLinear."""
    first = c.learner.agent.torso.net[0] if isinstance(c.learner.agent.torso, models.MLPTorso) else None
    if isinstance(first, models.NarrowLinear):
        first.forward = types.MethodType(nn.Linear.forward, first)
    return c


def update_part(settings: list[str], rounds: int, updates: int) -> None:
    names = ["as it is", "row-major heads", "plain first layer", "row-major heads, plain first layer"]
    action_major = models.both_heads

    def build(setting: str, name: str) -> Components:
        c = Components(setting_config(setting, 1))
        return plain_first_layer(c) if "plain first layer" in name else c

    def arrange(name: str) -> None:
        models.both_heads = row_major_heads if "row-major heads" in name else action_major

    try:
        update_table(settings, names, rounds, updates, build, arrange)
    finally:
        models.both_heads = action_major


# Updates per timing: about 0.2 s of each setting's updates (10 for any other).
TYPICAL_UPDATES = {
    "cartpole": 150,
    "cartpole-best": 15,
    "cartpole-best-bf16": 30,
    "cartpole-best-bf16-compiled": 30,
    "minatar-breakout-best-bf16": 12,
    "pong-best": 3,
}


def update_table(
    settings: list[str], names: list[str], rounds: int, updates: int, build: Callable[[str, str], Components], arrange: Callable[[str], None]
) -> None:
    """Print a table of whole learner updates (`Learner.step` on the throughput harness's batch, thread-CPU ms), a row
    per setting and a column per variant: each variant its own learner (`build(setting, name)`), timed in turns
    (`in_turns`) with `arrange(name)` called before each of its timings; `updates` per timing (0: TYPICAL_UPDATES)."""
    print(f"A learner update (thread-CPU ms): median (lowest) of {rounds} timings of N updates, the variants in turns")
    print("| setting (N) | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for setting in settings:
        learners = {name: build(setting, name) for name in names}
        n = updates or TYPICAL_UPDATES.get(setting, 10)

        def timing(name: str, learners: dict[str, Components] = learners, n: int = n) -> float:
            arrange(name)
            c = learners[name]
            return thread_ms(n, c.learner.step, c.batch)

        times = in_turns(names, timing, rounds)
        cells = [f"{statistics.median(t):.2f} ({min(t):.2f})" for t in times.values()]
        print(f"| {setting} ({n}) | " + " | ".join(cells) + " |", flush=True)


def module_at(rev: str, path: str) -> types.ModuleType:
    """The module at `path` (e.g. pronghorn/learner.py) as it was at git revision `rev`, imported as a module of
    its own (its imports are the package as it is): what the benchmarks' --before times against the code as it is."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shown = subprocess.run(["git", "-C", root, "show", f"{rev}:{path}"], capture_output=True, text=True)
    if shown.returncode != 0:
        raise ValueError(f"--before {rev}: git found no {path} there; give a commit of this repository")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(shown.stdout)
    name = f"{os.path.splitext(os.path.basename(path))[0]}_at_{rev}"
    spec = importlib.util.spec_from_file_location(name, f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile looks the compiled function's module up by name
    atexit.register(os.unlink, f.name)  # and its source, while it traces
    spec.loader.exec_module(module)
    return module


def in_turns(names: list[str], timing: Callable[[str], float], rounds: int) -> dict[str, list[float]]:
    """`rounds` timings of each variant, the variants in turns and the order reversed every round (the
    machine's speed drifts by more than the differences within minutes); a first round warms each up and is
    not counted."""
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds + 1):
        for name in names if r % 2 else names[::-1]:
            ms = timing(name)
            if r:
                times[name].append(ms)
    return times


def timing_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags both learner benchmarks take: --only, --rounds, --updates, --cpu."""
    parser.add_argument("--only", action="append", help="a setting of benchmarks/throughput.py (repeatable)")
    parser.add_argument("--rounds", type=int, default=10, help="timings of each variant (default 10)")
    parser.add_argument("--updates", type=int, default=0, help="updates per timing (default: about 0.2 s of each default setting's updates, else 10)")
    parser.add_argument("--cpu", type=int, default=min(1, (os.cpu_count() or 1) - 1), help="the CPU to pin this process to (default 1)")


def settings_to_time(parser: argparse.ArgumentParser, args: argparse.Namespace, default: list[str]) -> list[str]:
    """--only's settings (or `default`), checked (exit 2 with one line for a bad --rounds or an unknown setting);
    then this process is pinned to --cpu, with malloc tuned and one torch thread, as the learner process runs."""
    if args.rounds < 1:
        parser.error(f"--rounds is {args.rounds}: it must be at least 1")
    settings = args.only or default
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        parser.error(f"--only {unknown[0]}: not a setting of benchmarks/throughput.py; choose from {', '.join(SETTINGS)}")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    tune_malloc()
    limit_threads(1)
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["linear", "update", "vtrace", "all"], default="all")
    timing_arguments(parser)
    args = parser.parse_args()
    settings = settings_to_time(parser, args, ["cartpole-best-bf16", "cartpole-best", "cartpole", "minatar-breakout-best-bf16", "pong-best"])
    if args.part in ("update", "all") and any("compiled" in s for s in settings):
        parser.error("--only: a compiled setting traces the heads' layout once; choose a setting without -compiled")
    if args.part in ("linear", "all"):
        linear_part(args.rounds)
    if args.part in ("vtrace", "all"):
        vtrace_part(args.rounds)
    if args.part in ("update", "all"):
        update_part(settings, args.rounds, args.updates)


if __name__ == "__main__":
    main()
