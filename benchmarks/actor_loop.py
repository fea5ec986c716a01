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
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import typing

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pronghorn import Config
from pronghorn.actor import LocalPolicy, _Step, _write_row
from pronghorn.envs import make_batched, probe
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


def measure(env_id: str, envs: int, calls: int, sweep_mb: int, backend: str) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--envs", type=int, action="append", help="environments per actor (repeatable); default 16 and 512")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--sweep-mb", type=int, default=8)
    backends = typing.get_args(typing.get_type_hints(Config)["env_backend"])  # the Config's own choices
    parser.add_argument("--env-backend", default="auto", choices=backends, help="as pronghorn train's --env-backend")
    args = parser.parse_args()
    limit_threads(1)  # as an actor process runs
    for envs in args.envs or [16, 512]:
        measure(args.env, envs, args.calls, args.sweep_mb, args.env_backend)


if __name__ == "__main__":
    main()
