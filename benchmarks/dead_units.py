"""Learner-only probe: does a configuration keep its network alive on real observations?

Collects batches of a real environment under a uniform random policy (pronghorn's own env stack),
then runs the real Learner on them for a few hundred updates and prints, every --every updates, the
fraction of dead units per torso layer (never positive over the batch), the policy entropy, the
gradient norm and the mean value. No actors, no shared memory: two minutes to see what a setting does
to the network in its first hundreds of updates (issue 12: PyTorch's default initialisation with RMSProp
lost 75 % of the first convolution within 10 updates). It does not predict learning on its own: the fc
layer ended 61-77 % dead under every setting probed, including ones that learn Pong.

    .venv/bin/python benchmarks/dead_units.py --env ALE/Pong-v5 --updates 400 --set learning_rate=6e-4
    # the image defaults before issue 12 (the figures in docs/pong_learning.md):
    .venv/bin/python benchmarks/dead_units.py --set init=torch --set unroll_length=20 --set batch_size=32 \
        --set learning_rate=6e-4 --set rmsprop_eps=0.01
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np
import torch

from pronghorn.config import Config
from pronghorn.envs import make_batched, probe_levels
from pronghorn.learner import Learner
from pronghorn.models import build_agent
from pronghorn.records import Unroll, unroll_spec


def collect(cfg: Config, num_actions: int, batches: int) -> list[Unroll]:
    """`batches` learner batches of [T+1, B] rows under a uniform random policy (behaviour logits 0).

    Row 0 of each batch repeats the previous batch's row T, as an actor's unrolls do."""
    T, B = cfg.unroll_length, cfg.batch_size
    env = make_batched(cfg.env, list(range(cfg.seed, cfg.seed + B)), cfg)
    rng = np.random.default_rng(cfg.seed)

    def row(out):  # what the actor writes at time t: env output and the action chosen from obs[t]
        return (out.obs.copy(), out.reward.copy(), out.terminated.copy(), out.truncated.copy(), rng.integers(num_actions, size=B))

    out = env.reset()
    out.terminated[:] = True
    current, result = row(out), []
    for _ in range(batches):
        rows = [current]
        for _ in range(T):
            rows.append(row(env.step(rows[-1][4])))
        current = rows[-1]
        obs, rew, term, trunc, act = (np.stack(x) for x in zip(*rows))
        last_action = np.zeros_like(act)
        last_action[1:] = act[:-1]
        # Every field at zero from the slot layout, then the ones this probe fills: behaviour logits 0 is
        # the uniform policy that chose the actions, core state and levels are unused without LSTM/PopArt.
        zeros = Unroll(
            *(
                torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
                for shape, dtype in unroll_spec(T, B, obs.shape[2:], obs.dtype, num_actions, 0)
            )
        )
        result.append(
            zeros._replace(
                obs=torch.from_numpy(obs),
                reward=torch.from_numpy(rew),
                terminated=torch.from_numpy(term),
                truncated=torch.from_numpy(trunc),
                last_action=torch.from_numpy(last_action),
                action=torch.from_numpy(act),
            )
        )
    env.close()
    return result


def _value(text: str):
    """A --set value: an int, a float, true/false, or else the string itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--updates", type=int, default=400)
    parser.add_argument("--batches", type=int, default=24, help="distinct batches collected, cycled through")
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="any Config field, e.g. learning_rate=3e-4")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {key: _value(text) for key, text in (item.split("=", 1) for item in args.set)}
    cfg = Config(env=args.env, total_frames=10_000_000, env_backend="envpool" if args.env.startswith("ALE/") else "gymnasium", **overrides)
    spec = probe_levels(cfg)
    cfg = cfg.for_observations(spec.obs_shape)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    data = collect(cfg, spec.num_actions, args.batches)
    print(f"collected {len(data)} batches of {cfg.unroll_length}x{cfg.batch_size} in {time.perf_counter() - t0:.1f}s", flush=True)
    agent = build_agent(cfg, spec.obs_shape, spec.num_actions)
    learner = Learner(cfg, agent, spec.frames_per_step)
    changed = {k: v for k, v in dataclasses.asdict(cfg).items() if k in overrides}
    for update in range(args.updates + 1):
        metrics = learner.step(data[update % len(data)])
        if update % args.every == 0:
            dead = {k.split("/", 1)[1]: round(v, 3) for k, v in metrics.items() if k.startswith("dead/")}
            print(
                json.dumps(
                    {
                        "update": update,
                        **changed,
                        "dead": dead,
                        "entropy": round(metrics["entropy"], 3),
                        "grad_norm": round(metrics["grad_norm"], 1),
                        "value_mean": round(metrics["value_mean"], 3),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
