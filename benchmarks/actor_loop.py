"""Where an actor's time goes inside its loop, against each part called alone.

For one env batch (pronghorn's own, as an actor makes it) and the acting step the actor runs (`LocalPolicy.answer`),
in one process on one thread, it prints microseconds per call of:
  alone      the env step, called back to back (random actions); the answer, called back to back
  in loop    the actor's loop: env step, answer, slot-row write, each timed inside the loop
  between    the env step again, with other work between its calls: a copy of --sweep-mb MB (memory the
             step's own data then has to come back from), or matrix products on a footprint that fits L1

  .venv/bin/python benchmarks/actor_loop.py                        # CartPole, 16 and 512 envs
  .venv/bin/python benchmarks/actor_loop.py --env MinAtar/Breakout-v0 --envs 32
  .venv/bin/python benchmarks/actor_loop.py --env ALE/Pong-v5 --env-backend envpool --envs 16 --calls 800

With --before REV it then times the actor's loop (env step, answer, slot-row write) with the acting step
(`pronghorn/acting.py`'s `Acting`) and the env batch (`pronghorn/envs/batch.py`'s `GymBatch`, where the env
steps through it: MinAtar, `--env-backend gymnasium`) as they are and as they were at git revision REV, in turns in this one process,
pinned to --cpu, --rounds timings of --calls // 20 unrolls each, and prints each one's median and lowest
microseconds per step: a change to either against the code it replaced, in the same loop.

  .venv/bin/python benchmarks/actor_loop.py --envs 512 --before HEAD~1 --rounds 30
  .venv/bin/python benchmarks/actor_loop.py --env MinAtar/Breakout-v0 --envs 64 --calls 400 --before HEAD~1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import typing
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from learner_layouts import in_turns, module_at  # benchmarks/ is on the path: this script's own folder

from pronghorn import Config
from pronghorn.actor import LocalPolicy, _Step, _write_row
from pronghorn.envs import frames_per_step, make_batched, probe
from pronghorn.envs.batch import GymBatch
from pronghorn.envs.single import make_single
from pronghorn.records import Unroll, unroll_spec, zeros_unroll
from pronghorn.runtime.tuning import limit_threads


class _InitialWeights:
    """A WeightSource that leaves the agent's initial weights in place (version 0)."""

    version = 0

    def load_into(self, model: torch.nn.Module, timeout: float) -> int:
        return 0

    def load_version(self, model: torch.nn.Module, version: int, timeout: float) -> int:
        return 0


def per_call(fn, calls: int) -> float:
    """Microseconds per call of fn() (process CPU time)."""
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls * 1e6


def measure(env_id: str, envs: int, calls: int, sweep_mb: int, backend: str, before: Any = None, rounds: int = 0) -> None:
    cfg = Config(env=env_id, num_actors=1, envs_per_actor=envs, batch_size=envs, env_backend=backend)
    spec = probe(cfg.env, cfg)
    cfg = cfg.for_observations(spec.obs_shape)
    policy = LocalPolicy(0, cfg, spec, _InitialWeights())  # the actor's own answer, as run_actor calls it
    env = make_batched([env_id] * envs, list(range(envs)), cfg)
    out = env.reset()
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, spec.num_actions, envs) for _ in range(64)]
    slot = Unroll._make(t.numpy() for t in zeros_unroll(unroll_spec(20, envs, spec.obs_shape, spec.obs_dtype, spec.num_actions, policy.agent.core_size)))
    zeros = np.zeros(envs, np.int64)
    answer = policy.answer

    k = iter(range(10**12))
    env_alone = per_call(lambda: env.step(actions[next(k) % 64]), calls)
    answer_alone = per_call(lambda: answer(out, zeros), calls)

    inside = np.zeros(3)
    reply = answer(out, zeros)
    for i in range(calls):
        t0 = time.process_time()
        action = reply.action
        env_out = env.step(action)
        t1 = time.process_time()
        reply = answer(env_out, action)
        t2 = time.process_time()
        _write_row(slot, 1 + i % 20, _Step(env_out, action, reply), reply.truncation_value)
        inside += (t1 - t0, t2 - t1, time.process_time() - t2)
    inside *= 1e6 / calls

    source, target = torch.ones(sweep_mb * 2**18), torch.empty(sweep_mb * 2**18)
    small = torch.randn(64, 64)

    def env_between(work) -> float:
        total = 0.0
        for i in range(calls):
            t0 = time.process_time()
            env.step(actions[i % 64])
            total += time.process_time() - t0
            work()
        return total / calls * 1e6

    def products() -> None:
        for _ in range(300):
            small @ small

    sweep = env_between(lambda: target.copy_(source))
    arithmetic = env_between(products)
    env.close()
    print(
        f"{env_id} ({backend}) E={envs}: alone: env step {env_alone:7.1f} us, answer {answer_alone:7.1f} us"
        f" | in loop: env step {inside[0]:7.1f}, answer {inside[1]:7.1f}, slot write {inside[2]:6.1f}"
        f" | env step with a {sweep_mb} MB copy between calls {sweep:7.1f}, with 300 64x64 products between {arithmetic:7.1f}",
        flush=True,
    )
    if before is None:
        return
    # The acting step and the env batch as they are and as they were at REV: each variant its own Acting on the
    # same agent's weights, swapped into the same policy, and its own envs (made alike, seeded alike; at REV a
    # GymBatch from REV's batch.py, other batches as they are); each timing runs whole unrolls of 20 steps, as
    # run_actor does.
    acting_at, batch_at = before
    own = make_batched([env_id] * envs, list(range(envs)), cfg)
    if isinstance(own, GymBatch):
        levels, seeds = [env_id] * envs, list(range(envs))
        old = batch_at.GymBatch(
            levels, lambda level, seed: make_single(level, seed, cfg), seeds, frames_per_step(env_id), cfg.episodic_life, cfg.max_env_failures
        )
    else:
        old = make_batched([env_id] * envs, list(range(envs)), cfg)
    variants = {"as it is": (policy.acting, own), acting_at.__name__.replace("acting_at_", "at "): (acting_at.Acting(policy.agent, envs), old)}
    last = {}
    for name, (acting, batch) in variants.items():
        policy.acting = acting
        out = batch.reset()
        last[name] = _Step(out, zeros, answer(out, zeros))

    def unrolls(name: str) -> float:
        policy.acting, batch = variants[name]
        step = last[name]
        start = time.thread_time()
        for _ in range(max(1, calls // 20)):
            for t in range(1, 21):
                action = step.answer.action
                env_out = batch.step(action)
                step = _Step(env_out, action, answer(env_out, action))
                _write_row(slot, t, step, step.answer.truncation_value)
        spent = time.thread_time() - start
        last[name] = step
        return spent / (max(1, calls // 20) * 20) * 1e6

    times = in_turns(list(variants), unrolls, rounds)
    for _, batch in variants.values():
        batch.close()
    cells = [f"{name} {np.median(times[name]):7.1f} (lowest {min(times[name]):7.1f})" for name in variants]
    print(f"{env_id} ({backend}) E={envs}: the loop's step in turns, median of {rounds} timings, us: " + " | ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--envs", type=int, action="append", help="environments per actor (repeatable); default 16 and 512")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--sweep-mb", type=int, default=8)
    backends = typing.get_args(typing.get_type_hints(Config)["env_backend"])  # the Config's own choices
    parser.add_argument("--env-backend", default="auto", choices=backends, help="as pronghorn train's --env-backend")
    parser.add_argument("--before", help="also time the loop with pronghorn/acting.py and envs/batch.py as they were at this git revision, in turns")
    parser.add_argument("--rounds", type=int, default=20, help="with --before: timings of each variant (default 20)")
    parser.add_argument("--cpu", type=int, default=min(1, (os.cpu_count() or 1) - 1), help="with --before: the CPU to pin this process to (default 1)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds is {args.rounds}: it must be at least 1")
    try:
        before = (module_at(args.before, "pronghorn/acting.py"), module_at(args.before, "pronghorn/envs/batch.py")) if args.before else None
    except ValueError as exc:
        parser.error(str(exc))
    if before is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    limit_threads(1)  # as an actor process runs
    for envs in args.envs or [16, 512]:
        measure(args.env, envs, args.calls, args.sweep_mb, args.env_backend, before, args.rounds)


if __name__ == "__main__":
    main()
