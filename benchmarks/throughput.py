"""How close does pronghorn run to this machine's component limit?

For each setting, in one run, with the same envs and worker count as the end-to-end run:
  1. environment stepping with random actions, the fastest way this machine has (the cheapest of
     pronghorn's own env batch, raw envpool and Gymnasium's numpy-vectorised env, where they exist; the
     fastest is then timed again, and that second timing is its cost) -> core-seconds per frame
  2. batched policy inference (+ sampling), batch E, as an actor runs it -> core-seconds per frame
  3. the learner's update on a [T+1, B] batch       -> core-seconds per frame
  component limit = cores / (sum of the three)       (frames/s if every core did only useful work)
then pronghorn end to end (actors + staging + learner) and the ratio of its training frames/s to that limit.
Each component is timed on one thread, as the actors and (on 2 cores) the learner run, once before the
end-to-end run and once after it: the limit uses the mean of the two, so a machine that speeds up or slows
down over the minutes of one setting moves both sides of the ratio alike (the two are printed as well).
Where the two differ by more than 1.5x, one of them is far off: the components are timed a third time
and the limit takes each one's median of the three.

With --interleave N the limit is timed between stretches of training instead (benchmarks/interleave.py):
training runs as `pronghorn train` runs, in processes of its own, for --e2e-seconds in N + 1 windows; in each
of the N pauses between them its processes are stopped and the components timed; frames/s counts the windows
only, and the limit takes each component's mean over the pauses. The same work runs tens of percent faster or
slower from one few-second stretch to the next on these machines, and this way the limit and the training
sample the same stretches.

Beside each ratio, the layout cap: the highest ratio pronghorn's threads allow with the same costs. Each actor
steps and answers on one thread and the learner updates on its own (one, on 2 cores, but the deep ResNet's
two), so training cannot pass actors / (env + inference) or learner threads / learner frames/s, whatever
the other core does (`layout_cap`). Where one learner thread costs more than half the sum, the cap is below 1:
the ratio then measures the layout and the glue, the cap the layout alone.

  .venv/bin/python benchmarks/throughput.py [--only SETTING ...]
  .venv/bin/python benchmarks/throughput.py --inference both --readme README.md   # regenerates the README table
  .venv/bin/python benchmarks/throughput.py --runtime ray --only cartpole-e32 --only pong-envpool

With --inference both each setting is also trained with the other inference mode (actor / central) and
both are printed with their ratio. Settings named "-best" are the configuration found closest to its limit for the env (more envs per
actor, larger batches; for CartPole and MinAtar one actor process, so two processes share two cores with neither
time-sliced; "-best-bf16" the same with the learner's products in bfloat16); the others are pronghorn's defaults.

With --repeats N every setting is measured N times, the settings in turn (round 1 runs each once, then
round 2, ...), so a machine that drifts over the minutes of a run moves every setting alike. Rows on this
kind of machine move by up to ±0.1 between runs minutes apart: the table then shows each setting's median
round and every round's ratio beside it.

  .venv/bin/python benchmarks/throughput.py --only cartpole --only cartpole-best --repeats 3

With --runtime ray it also trains each setting on Ray, on a private one-node instance and on a simulated
two-node cluster (ray.cluster_utils, one CPU per node), and prints frames/s, mean policy lag and the
ratio to the local runtime.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import dataclasses
import io
import os
import sys
import tempfile
import time
from typing import Any

# Before torch loads, as `pronghorn train` sets it where the learner's threads share cores with actors
# (pronghorn/runtime/tuning.py, quiet_openmp): on 2 cores that is the deep ResNet's learner, the only one here
# with two threads; every other learner and every component timing runs one thread, which the policy leaves
# alone. Where the cores outnumber the actors, learners with threads of their own sleep here and spin there.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pronghorn import Config, train
from pronghorn.acting import Acting
from pronghorn.config import resolved
from pronghorn.envs import EnvSpec, make_batched, probe
from pronghorn.learner import Learner
from pronghorn.models import build_agent
from pronghorn.records import Unroll, unroll_spec
from pronghorn.runtime.tuning import learner_thread_count, limit_threads, tune_malloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interleave import interleaved
from readme_table import write_table

SETTINGS: dict[str, dict[str, Any]] = {
    "cartpole": dict(env="CartPole-v1"),  # the defaults: 16 envs per actor, Gymnasium's vector CartPole (chosen for learning speed too)
    "cartpole-e32": dict(env="CartPole-v1", envs_per_actor=32),  # more envs per actor amortise per-step glue
    "cartpole-e32-t10": dict(env="CartPole-v1", envs_per_actor=32, unroll_length=10),  # 320 frames per update, as the defaults
    "cartpole-e64": dict(env="CartPole-v1", envs_per_actor=64, batch_size=128),
    "cartpole-2x128": dict(env="CartPole-v1", envs_per_actor=128, batch_size=256),  # the fastest with two actors
    "cartpole-e256": dict(env="CartPole-v1", envs_per_actor=256, batch_size=512),
    # One actor: two processes on two cores, none time-sliced; at E=512 the actor and the learner take about a core each.
    "cartpole-best": dict(env="CartPole-v1", num_actors=1, envs_per_actor=512, batch_size=512),
    "cartpole-1x768": dict(env="CartPole-v1", num_actors=1, envs_per_actor=768, batch_size=768),  # faster, but the learner's core is the bottleneck
    # Around the best: longer unrolls, two unrolls per batch, fewer envs (docs/throughput_log.md, "Why CartPole's best stays below 0.85").
    "cartpole-1x512-t40": dict(env="CartPole-v1", num_actors=1, envs_per_actor=512, batch_size=512, unroll_length=40),
    "cartpole-1x512-b1024": dict(env="CartPole-v1", num_actors=1, envs_per_actor=512, batch_size=1024),
    # The learner's products in bfloat16 (AVX512-BF16 and AMX here), where the best setting's one learner thread is the bottleneck.
    "cartpole-best-bf16": dict(env="CartPole-v1", num_actors=1, envs_per_actor=512, batch_size=512, learner_precision="bf16"),
    "cartpole-bf16": dict(env="CartPole-v1", learner_precision="bf16"),
    "cartpole-1x768-bf16": dict(env="CartPole-v1", num_actors=1, envs_per_actor=768, batch_size=768, learner_precision="bf16"),
    "cartpole-1x1024-bf16": dict(env="CartPole-v1", num_actors=1, envs_per_actor=1024, batch_size=1024, learner_precision="bf16"),
    "cartpole-1x16": dict(env="CartPole-v1", num_actors=1),  # the defaults' batch shape, one actor process
    "cartpole-1x32": dict(env="CartPole-v1", num_actors=1, envs_per_actor=32, batch_size=32),
    "cartpole-1x256-b512": dict(env="CartPole-v1", num_actors=1, envs_per_actor=256, batch_size=512),
    # --compile-learner beside the same settings without it (docs/performance.md, "The learner compiled").
    "cartpole-compiled": dict(env="CartPole-v1", compile_learner=True),
    "cartpole-best-compiled": dict(env="CartPole-v1", num_actors=1, envs_per_actor=512, batch_size=512, compile_learner=True),
    # Both: the learner's update cheap enough that the actor's core is as busy as the learner's (docs/throughput_log.md, "CartPole's best, compiled").
    "cartpole-best-bf16-compiled": dict(env="CartPole-v1", num_actors=1, envs_per_actor=512, batch_size=512, learner_precision="bf16", compile_learner=True),
    # More envs, compiled: no closer to the limit (docs/throughput_log.md, "CartPole's best, compiled").
    "cartpole-1x1024-bf16-compiled": dict(
        env="CartPole-v1", num_actors=1, envs_per_actor=1024, batch_size=1024, learner_precision="bf16", compile_learner=True
    ),
    # 2048 envs (2026-12-07, an Intel Xeon): two rounds 0.805 / 0.748 against 0.737 / 0.726 for 512 and 0.771 / 0.773 for 1024.
    "cartpole-1x2048-bf16-compiled": dict(
        env="CartPole-v1", num_actors=1, envs_per_actor=2048, batch_size=2048, learner_precision="bf16", compile_learner=True
    ),
    # 768 envs, bfloat16 and compiled: two rounds (2026-12-06), 0.84 / 0.83 against 0.85 / 0.83 for 512 in the same run.
    "cartpole-1x768-bf16-compiled": dict(env="CartPole-v1", num_actors=1, envs_per_actor=768, batch_size=768, learner_precision="bf16", compile_learner=True),
    # Around it, bfloat16 and compiled: two unrolls per batch, unrolls of 40, 256 envs; each further from the limit in
    # two rounds (2026-12-05: 0.77 / 0.79, 0.81 / 0.78, 0.78 / 0.77 against 0.84 / 0.84).
    "cartpole-1x512-b1024-bf16-compiled": dict(
        env="CartPole-v1", num_actors=1, envs_per_actor=512, batch_size=1024, learner_precision="bf16", compile_learner=True
    ),
    "cartpole-1x512-t40-bf16-compiled": dict(
        env="CartPole-v1", num_actors=1, envs_per_actor=512, batch_size=512, unroll_length=40, learner_precision="bf16", compile_learner=True
    ),
    # Two actor processes beside the learner, compiled (2026-12-07, after the behaviour logits went action-major):
    # three rounds of 2x512 against the best, 0.80 / 0.67 / 0.74 against 0.79 / 0.78 / 0.78; 2x256 in one round 0.77
    # against 0.76. Three processes on two cores, no closer.
    "cartpole-2x256-b512-bf16-compiled": dict(
        env="CartPole-v1", num_actors=2, envs_per_actor=256, batch_size=512, learner_precision="bf16", compile_learner=True
    ),
    "cartpole-2x512-bf16-compiled": dict(env="CartPole-v1", num_actors=2, envs_per_actor=512, batch_size=512, learner_precision="bf16", compile_learner=True),
    "cartpole-1x256-bf16-compiled": dict(env="CartPole-v1", num_actors=1, envs_per_actor=256, batch_size=256, learner_precision="bf16", compile_learner=True),
    "minatar-breakout-compiled": dict(env="MinAtar/Breakout-v0", compile_learner=True),
    "pong-envpool-compiled": dict(env="ALE/Pong-v5", env_backend="envpool", model="shallow", compile_learner=True),
    "minatar-breakout": dict(env="MinAtar/Breakout-v0"),  # the defaults: one unroll of 32 envs per batch of 32
    # MinAtar's best with its learner in bfloat16, compiled, or both (2026-12-05). bf16, two rounds against 0.88 / 0.88
    # at 79,333 / 79,918 frames/s for the best: 0.66 / 0.67 at 83,059 / 82,563 (its update at 5.8-6.1 core-µs per
    # frame leaves the actor's core the bottleneck). One round against 0.87 at 78,320: compiled 0.79 at 49,269 (the
    # update at 22.2 core-µs per frame against 12.4 eager), both 0.89 but slower, 69,954 (the update at 15.7).
    "minatar-breakout-1x96-bf16": dict(env="MinAtar/Breakout-v0", num_actors=1, envs_per_actor=96, batch_size=96, learner_precision="bf16"),
    "minatar-breakout-1x96-compiled": dict(env="MinAtar/Breakout-v0", num_actors=1, envs_per_actor=96, batch_size=96, compile_learner=True),
    "minatar-breakout-1x96-bf16-compiled": dict(
        env="MinAtar/Breakout-v0", num_actors=1, envs_per_actor=96, batch_size=96, learner_precision="bf16", compile_learner=True
    ),
    # One actor process of 96 envs: two processes on two cores, none time-sliced, the actor's step and the
    # learner's update about a core each. Against 2 actors of 64 envs (the best until 2026-12-05, now
    # minatar-breakout-2x64), 2026-12-05: 0.82-0.90 of the limit in seven rounds (median 0.86) against 0.79-0.84
    # (docs/performance.md, "MinAtar's best"); it learns a little less per frame than 2x64 (larger, fewer updates).
    "minatar-breakout-best": dict(env="MinAtar/Breakout-v0", num_actors=1, envs_per_actor=96, batch_size=96),
    # The best from 2026-12-03 to 12-05: the fastest of E=32/B=64, E=64/B=64, A=1 E=64/B=64 and E=64/B=128 in one run
    # (2026-12-03): 34,733, 38,374, 37,952, 34,551 fps.
    "minatar-breakout-2x64": dict(env="MinAtar/Breakout-v0", envs_per_actor=64, batch_size=64),
    "minatar-breakout-e8": dict(env="MinAtar/Breakout-v0", envs_per_actor=8),  # the defaults until 2026-12-03: 4 unrolls of 8 envs
    "minatar-breakout-e16": dict(env="MinAtar/Breakout-v0", envs_per_actor=16),  # the defaults' batch of 32, as 2 unrolls of 16 envs
    "minatar-breakout-e32-b64": dict(env="MinAtar/Breakout-v0", envs_per_actor=32, batch_size=64),
    "minatar-breakout-e64-b128": dict(env="MinAtar/Breakout-v0", envs_per_actor=64, batch_size=128),
    "minatar-breakout-1x64": dict(env="MinAtar/Breakout-v0", num_actors=1, envs_per_actor=64, batch_size=64),
    # As close to the limit as 1x96 (0.87 / 0.87 / 0.87 / 0.81), and less learned at 5M frames (docs/performance.md, "MinAtar's best").
    "minatar-breakout-1x128": dict(env="MinAtar/Breakout-v0", num_actors=1, envs_per_actor=128, batch_size=128),
    # The 2x64 setting with the learner in bfloat16 (named when 2x64 was the best). The fastest MinAtar setting: three
    # processes on two cores, the update cheap enough (8.7-10.8 core-µs per frame) that both cores stay busy.
    # 2026-12-06, five rounds: 0.83 / 0.87 / 0.83 / 0.81 / 0.84 of the limit at 73-76K frames/s, against the best's
    # 0.80 / 0.85 / 0.83 / 0.85 / 0.77 at 55-61K (docs/performance.md, "MinAtar's best in bfloat16").
    "minatar-breakout-best-bf16": dict(env="MinAtar/Breakout-v0", envs_per_actor=64, batch_size=64, learner_precision="bf16"),
    # The same with each actor pinned to a core (docs/performance.md, "Actors pinned to cores": closer to the limit than unpinned in
    # six alternated rounds of six, where MinAtar's defaults pinned were further in three of three). Not the
    # default for MinAtar: `auto` leaves envs that step on the actor's own thread unpinned.
    "minatar-breakout-best-bf16-pinned": dict(env="MinAtar/Breakout-v0", envs_per_actor=64, batch_size=64, learner_precision="bf16", pin_actors="on"),
    # MinAtar's best in bfloat16, compiled, once the small CNN's compiled pass lost its slow kernels (2026-12-07,
    # docs/throughput_log.md, "The small CNN compiled"): two rounds 0.59 / 0.81 against 0.33 / 0.82 eager, at 43,344 /
    # 70,604 against 27,179 / 69,208 frames/s.
    "minatar-breakout-best-bf16-compiled": dict(env="MinAtar/Breakout-v0", envs_per_actor=64, batch_size=64, learner_precision="bf16", compile_learner=True),
    # Around it in bfloat16 (2026-12-06, docs/performance.md, "MinAtar's best in bfloat16"): none closer or faster in the same runs.
    "minatar-breakout-2x48-bf16": dict(env="MinAtar/Breakout-v0", envs_per_actor=48, batch_size=48, learner_precision="bf16"),
    "minatar-breakout-2x96-bf16": dict(env="MinAtar/Breakout-v0", envs_per_actor=96, batch_size=96, learner_precision="bf16"),
    "minatar-breakout-3x32-bf16": dict(env="MinAtar/Breakout-v0", num_actors=3, envs_per_actor=32, batch_size=32, learner_precision="bf16"),
    "pong": dict(env="ALE/Pong-v5", model="shallow"),  # the defaults: ale-py's vector env (--env-backend auto), 8 envs per actor
    "pong-best": dict(env="ALE/Pong-v5", model="shallow", envs_per_actor=16, batch_size=32),
    # Pong's best with the learner in bfloat16: the fastest Pong setting (2026-12-05, three rounds: 0.84 / 0.85 / 0.90 of
    # the limit at 12,194 / 12,007 / 12,094 frames/s, against 0.85 / 0.86 / 0.86 at 11,334 / 11,131 / 10,489 in fp32).
    "pong-best-bf16": dict(env="ALE/Pong-v5", model="shallow", envs_per_actor=16, batch_size=32, learner_precision="bf16"),
    "pong-envpool": dict(env="ALE/Pong-v5", env_backend="envpool", model="shallow"),
    "pong-envpool-best": dict(env="ALE/Pong-v5", env_backend="envpool", model="shallow", envs_per_actor=16, batch_size=32),
    # One actor, as MinAtar's best: here the actor's step (env + answer, ~90 core-µs per frame) outweighs the learner's
    # update (~67), so its core is the bottleneck (2026-12-05: 0.68 / 0.69 against 0.78 / 0.78 for pong-envpool-best).
    "pong-envpool-1x32": dict(env="ALE/Pong-v5", env_backend="envpool", model="shallow", num_actors=1, envs_per_actor=32, batch_size=32),
    "pong-envpool-e32-b64": dict(env="ALE/Pong-v5", env_backend="envpool", model="shallow", envs_per_actor=32, batch_size=64),
    "pong-envpool-e16-b64": dict(env="ALE/Pong-v5", env_backend="envpool", model="shallow", envs_per_actor=16, batch_size=64),
    # The learner's products in bfloat16 (AVX512-BF16 here): the same env and batch as pong-envpool(-best).
    "pong-envpool-bf16": dict(env="ALE/Pong-v5", env_backend="envpool", model="shallow", learner_precision="bf16"),
    "pong-envpool-best-bf16": dict(env="ALE/Pong-v5", env_backend="envpool", model="shallow", envs_per_actor=16, batch_size=32, learner_precision="bf16"),
    "pong-nature": dict(env="ALE/Pong-v5", env_backend="envpool", model="nature", sticky_actions=0.0),  # peer.py's Pong command
    "pong-nature-bf16": dict(env="ALE/Pong-v5", env_backend="envpool", model="nature", sticky_actions=0.0, learner_precision="bf16"),
    "pong-gymnasium": dict(env="ALE/Pong-v5", env_backend="gymnasium", model="shallow"),
    "pong-lstm": dict(env="ALE/Pong-v5", model="shallow", lstm=True),
    "pong-deep": dict(env="ALE/Pong-v5", model="deep"),
    "pong-deep-bf16": dict(env="ALE/Pong-v5", model="deep", learner_precision="bf16"),
    # The deep ResNet's learner compiled, its max-pools as ATen's kernels (pronghorn/max_pool.py; docs/throughput_log.md,
    # "The deep ResNet's max-pools compiled").
    "pong-deep-compiled": dict(env="ALE/Pong-v5", model="deep", compile_learner=True),
    "pong-deep-bf16-compiled": dict(env="ALE/Pong-v5", model="deep", learner_precision="bf16", compile_learner=True),
}
# Component timings before and after one end-to-end run that differ by more than this factor get a third.
_RETIME_ABOVE = 1.5

DEFAULT_SETTINGS = [
    "cartpole",
    "cartpole-best",
    "cartpole-best-bf16",
    "cartpole-best-bf16-compiled",
    "minatar-breakout",
    "minatar-breakout-best",
    "minatar-breakout-best-bf16",
    "pong",
    "pong-best",
    "pong-best-bf16",
    "pong-envpool",
    "pong-envpool-best",
    "pong-lstm",
    "pong-deep",
]


def setting_config(name: str, num_actors: int, **changes: Any) -> Config:
    """The resolved Config of SETTINGS[name], with `num_actors` where the setting names none, and `changes`.

    Built from the setting each time, not replaced in a resolved Config: defaults that follow a changed
    flag (--actor-nice follows --inference) are filled in again."""
    cfg = Config(**{"num_actors": num_actors, **SETTINGS[name], **changes})
    return cfg.for_observations(probe(cfg.env, cfg).obs_shape)


def cpu_time_per(fn, units_per_call: int, min_seconds: float, warmup: int = 3) -> float:
    """Process CPU seconds per unit (all threads of this process count), measured for >= min_seconds."""
    for _ in range(warmup):
        fn()
    calls, start_cpu, start = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - start < min_seconds:
        fn()
        calls += 1
    return (time.process_time() - start_cpu) / (calls * units_per_call)


class Components:
    """A setting's three components, built once and timed as often as asked, in core-seconds per frame.

    The first timing picks the fastest env stepper (or takes `stepper`); later ones time that stepper only.
    Each timing starts the learner from the same weights and optimizer state, so every timing sees the same
    numbers (a compiled learner compiles once, not once per timing)."""

    def __init__(self, cfg: Config, stepper: str | None = None):
        self.cfg, self.stepper = cfg, stepper
        self.spec = spec = probe(cfg.env, cfg)
        E, T, B = cfg.envs, resolved(cfg.unroll_length, "unroll_length"), resolved(cfg.batch_size, "batch_size")
        self._frames_per_update = T * B * spec.frames_per_step
        # Seeded, so the weights timed do not depend on what this process ran before: after the LSTM setting's
        # runs, the deep ResNet's weights from torch's global random state made its update compute on denormal
        # floats, at 9x its cost (docs/throughput_log.md, "Tables and rounds").
        torch.manual_seed(0)
        agent = build_agent(cfg, spec.obs_shape, spec.num_actions)
        agent.eval()
        self.acting = Acting(agent, E)  # the actors' own step (LocalPolicy.answer calls it); it reads the agent's weights
        self._state = agent.initial_state(E)
        layout = unroll_spec(T, B, spec.obs_shape, spec.obs_dtype, spec.num_actions, agent.core_size)
        g = torch.Generator().manual_seed(0)

        def make(shape, dtype):
            t = torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
            if t.dtype == torch.uint8:
                t.random_(0, 255, generator=g)
            elif t.is_floating_point():
                t.normal_(generator=g)
            return t

        batch = Unroll(*(make(shape, dtype) for shape, dtype in layout))
        self.batch = batch._replace(
            action=batch.action.random_(0, spec.num_actions, generator=g), last_action=batch.last_action.zero_(), policy_version=batch.policy_version.zero_()
        )
        self.learner = Learner(cfg, agent, spec.frames_per_step)
        self._start = copy.deepcopy(self.learner.state_dict())
        self.learner.step(self.batch)  # a compiled learner compiles here, not in a timing (--interleave's pauses stay short)

    def time(self, seconds: float) -> tuple[dict[str, float], str]:
        """Core-seconds per frame of env stepping (the fastest stepper), inference and the learner; and the stepper."""
        cfg, spec, E = self.cfg, self.spec, self.cfg.envs
        env_costs, obs = stepper_costs(cfg, spec, seconds / 2, self.stepper)
        fastest = min(env_costs, key=lambda k: env_costs[k])
        if len(env_costs) > 1:
            # The lowest of several noisy timings reads below its stepper's cost (the pick favours whichever
            # timing ran lucky): the timing that picks the fastest stepper is not the one that prices it.
            env_costs, _ = stepper_costs(cfg, spec, seconds / 2, fastest)
        self.stepper = fastest
        self.learner.load_state_dict(self._start)  # the weights below are those of every other timing
        acting, state = self.acting, self._state
        zeros_a, zeros_r, zeros_d = torch.zeros(E, dtype=torch.long), torch.zeros(E), torch.zeros(E, dtype=torch.bool)
        level = torch.zeros(E, dtype=torch.int64)
        draws = np.random.default_rng(0)
        obs_np = obs.numpy()

        def infer():  # as LocalPolicy.answer calls it: numpy in and out for the MLP; Acting enters inference mode itself where it helps
            uniform = draws.random((E, 1), dtype=np.float32)
            if acting.mode == "numpy":
                acting.numpy_answer(obs_np, uniform)
            else:
                acting(obs, zeros_a, zeros_r, zeros_d, state, level, torch.from_numpy(uniform))

        infer_cost = cpu_time_per(infer, E * spec.frames_per_step, seconds)
        learn_cost = cpu_time_per(lambda: self.learner.step(self.batch), self._frames_per_update, seconds, warmup=2)
        return {"env": env_costs[fastest], "inference": infer_cost, "learner": learn_cost}, fastest


def measure_components(cfg: Config, seconds: float, stepper: str | None = None) -> tuple[dict[str, float], str]:
    """Core-seconds per frame of env stepping (the fastest stepper, or `stepper`), inference and the learner."""
    return Components(cfg, stepper).time(seconds)


def layout_cap(costs: dict[str, float], cfg: Config, cores: int) -> float:
    """The most of the component limit that pronghorn's threads can reach, from the same component costs.

    The limit spreads every component over every core. pronghorn runs each on threads of its own: an actor
    process steps its envs and answers them (actor inference) on one thread, the learner updates on its torch
    threads (`learner_thread_count`), and central inference answers on one thread of the learner's process.
    None of them goes faster than its threads allow, however idle the other cores are: training cannot pass
    actors / (env + inference), nor threads / learner frames/s. Returns the lowest bound over the limit (at most
    1). On 2 cores, where one learner thread's update costs more than half the sum (CartPole's and MinAtar's
    best), that is (sum) / (2 x learner)."""
    env, inference, learner = costs["env"], costs["inference"], costs["learner"]
    limit = cores / (env + inference + learner)
    threads = learner_thread_count(cfg, True, cores)  # as on CPU: the deep ResNet's learner gets two
    if cfg.inference == "central":
        bounds = [cfg.num_actors / env, 1 / inference, threads / learner]
    else:
        bounds = [cfg.num_actors / (env + inference), threads / learner]
    return min(1.0, min(bounds) / limit)


def cpu_model() -> str:
    """The processor's name as Linux reports it ("unknown" elsewhere): machines of one kind differ between runs."""
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else "unknown"


def stepper_costs(cfg: Config, spec: EnvSpec, seconds: float, stepper: str | None = None) -> tuple[dict[str, float], torch.Tensor]:
    """Core-seconds per frame of each way to step cfg's envs with random actions (or of `stepper` alone),
    and one batch of observations from pronghorn's own env batch for the inference timing. spec: probe(cfg.env)."""
    E, fps = cfg.envs, spec.frames_per_step
    env = make_batched(cfg.env, list(range(E)), cfg)
    env.reset()
    rng = np.random.default_rng(0)
    costs = {}
    if stepper in (None, "pronghorn"):
        costs["pronghorn"] = cpu_time_per(lambda: env.step(rng.integers(0, spec.num_actions, size=E)), E * fps, seconds)
    obs = torch.from_numpy(env.step(np.zeros(E, np.int64)).obs.copy())
    env.close()
    if stepper != "pronghorn":
        costs.update(raw_env_costs(cfg.env, E, spec.num_actions, fps, seconds, only=stepper))
    return costs, obs


def raw_env_costs(level: str, E: int, num_actions: int, frames_per_step: int, seconds: float, only: str | None = None) -> dict[str, float]:
    """Core-seconds per frame of the env's own batched steppers, without pronghorn's glue (where they exist)."""
    import gymnasium as gym

    rng = np.random.default_rng(0)
    costs = {}
    if only in (None, "envpool"):
        try:
            import envpool

            if level.startswith("ALE/"):
                kwargs = dict(frame_skip=4, stack_num=4, img_height=84, img_width=84)
                pool = envpool.make(level.split("/", 1)[1], env_type="gymnasium", num_envs=E, batch_size=E, num_threads=1, **kwargs)
            else:
                pool = envpool.make(level, env_type="gymnasium", num_envs=E, batch_size=E, num_threads=1)
            pool.reset()
            costs["envpool"] = cpu_time_per(lambda: pool.step(rng.integers(0, num_actions, E).astype(np.int32)), E * frames_per_step, seconds)
            pool.close()
        except Exception:  # envpool does not serve this id
            pass
    spec = gym.spec(level) if level in gym.registry else None
    if spec is not None and spec.vector_entry_point is not None and only in (None, "gym-vector"):
        vec = gym.make_vec(level, num_envs=E, vectorization_mode="vector_entry_point")
        vec.reset(seed=0)
        costs["gym-vector"] = cpu_time_per(lambda: vec.step(rng.integers(0, num_actions, E)), E * frames_per_step, seconds)
        vec.close()
    return costs


def end_to_end(cfg: Config, frames: int, with_lag: bool | str = False) -> Any:
    """Steady-state training frames/s (and, with_lag, the mean policy lag over the same rows)."""
    with tempfile.TemporaryDirectory() as logdir, contextlib.redirect_stderr(io.StringIO()):
        result = train(Config(**{**cfg.__dict__, "total_frames": frames, "logdir": logdir, "progress": False, "log_interval": 2.0, "stop_at_return": 1e12}))
        with open(os.path.join(logdir, "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
    # Steady state: skip the first rows (process start-up, first weights), then frames over time.
    rows = rows[max(1, len(rows) // 4) :]
    if len(rows) < 2:
        fps = result.frames / result.wall_time
    else:
        fps = (float(rows[-1]["frames"]) - float(rows[0]["frames"])) / (float(rows[-1]["time"]) - float(rows[0]["time"]))
    lag = sum(float(r["policy_lag_mean"]) for r in rows) / max(1, len(rows))
    if with_lag == "store":  # Ray: also the most object store the run held, and its bound
        used = [float(r["object_store_mib"]) for r in rows if r.get("object_store_mib") not in (None, "", "nan")]
        return fps, lag, max(used, default=float("nan")), float(rows[-1].get("object_store_bound_mib") or "nan")
    return (fps, lag) if with_lag else fps


def ray_comparison(cfg: Config, frames: int) -> str:
    """Local vs Ray on one node vs Ray on two simulated nodes: frames/s, mean policy lag, ratios."""
    from ray.cluster_utils import Cluster

    local, lag = end_to_end(cfg, frames, with_lag=True)
    one, lag1, store1, bound = end_to_end(dataclasses.replace(cfg, runtime="ray"), frames, with_lag="store")
    store = 300 * 2**20
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=store)
        cluster.wait_for_nodes()
        two, lag2, store2, _ = end_to_end(dataclasses.replace(cfg, runtime="ray", ray_address=cluster.address), frames, with_lag="store")
    finally:
        cluster.shutdown()
    return (
        f"local {local:9,.0f} fps (lag {lag:.2f}) | ray, 1 node {one:9,.0f} fps (lag {lag1:.2f}, {one / local:.2f}x)"
        f" | ray, 2 simulated nodes {two:9,.0f} fps (lag {lag2:.2f}, {two / local:.2f}x)"
        f" | object store at most {store1:.2f} / {store2:.2f} MiB (1 / 2 nodes), bound {bound:.2f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append")
    parser.add_argument("--seconds", type=float, default=8.0, help="minimum seconds per component measurement")
    parser.add_argument("--e2e-seconds", type=float, default=45.0, help="approximate length of each end-to-end run")
    parser.add_argument("--num-actors", type=int, default=2, help="actor processes, where a setting does not name its own")
    parser.add_argument("--deterministic-cost", action="store_true", help="also run end to end with --deterministic and print its fps / normal fps")
    parser.add_argument("--runtime", choices=("local", "ray"), default="local", help="ray: also compare the Ray runtime (1 node, 2 simulated nodes)")
    parser.add_argument("--inference", choices=("default", "both"), default="default", help="both: train each setting with actor and with central inference")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="measure every setting this many times, in turns (each round runs every setting once); the table shows each setting's median round and every round's ratio",
    )
    parser.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="N",
        help="train in processes of its own and time the components in N pauses of that training (benchmarks/interleave.py), not before and after it; --e2e-seconds of training in N+1 windows",
    )
    parser.add_argument("--readme", help="write the table between the throughput markers of this README")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats is {args.repeats}: use 1 or more rounds")
    if args.interleave < 0 or (args.interleave and args.runtime == "ray"):
        parser.error(f"--interleave is {args.interleave}: use 1 or more pauses, on the local runtime (0: time the limit before and after training)")
    if args.runtime == "ray":
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback, before Ray is imported
    cores = os.cpu_count() or 1
    tune_malloc()  # the learner process does the same
    limit_threads(1)  # as actors run (the MLP's acting step multiplies in numpy)
    print(
        f"machine: {cores} cores ({cpu_model()}); torch {torch.__version__}; {args.num_actors} actor processes (A=, unless a setting names its own); component costs on one thread\n"
    )
    table = [
        "| setting | env (fastest stepper) | inference | learner (µs/frame) | limit (fps) | pronghorn (fps) | ratio | layout cap |"
        + (" other inference (fps, ratio) |" if args.inference == "both" else ""),
        "|---|---|---|---|---|---|---|---|" + ("---|" if args.inference == "both" else ""),
    ]
    if args.repeats > 1:
        table[0] += " ratio in each round |"
        table[1] += "---|"

    def setting(name: str, **changes: Any) -> Config:
        return setting_config(name, args.num_actors, **changes)

    def trained_in_turns(cfg: Config, components: Components) -> tuple[float, dict[str, float], str, str]:
        """--interleave: frames/s over the windows of training, the components' mean cost over the pauses, the limits."""
        fps, timings, stepper = interleaved(cfg, lambda: components.time(args.seconds), args.interleave, args.e2e_seconds / (args.interleave + 1))
        costs = {k: sum(t[k] for t in timings) / len(timings) for k in timings[0]}
        return fps, costs, "limits in the pauses " + " / ".join(f"{cores / sum(t.values()):,.0f}" for t in timings), stepper

    def measure(name: str, rnd: int) -> tuple[float, str]:
        """One round of one setting: prints its line, returns (ratio, table row)."""
        cfg = setting(name)
        components = Components(cfg)
        if args.interleave:
            measured, costs, limits, stepper = trained_in_turns(cfg, components)
        else:
            before, stepper = components.time(args.seconds)
            frames = int(cores / sum(before.values()) * args.e2e_seconds * 0.6)
            measured = end_to_end(cfg, frames)
            torch.set_num_threads(1)
            after, _ = components.time(args.seconds)
            costs = {k: (before[k] + after[k]) / 2 for k in before}
            before_sum, after_sum = sum(before.values()), sum(after.values())
            limits = f"limit before {cores / before_sum:9,.0f}, after {cores / after_sum:9,.0f}"
            if max(before_sum, after_sum) > _RETIME_ABOVE * min(before_sum, after_sum):
                # One timing is far off (2026-12-05, before measure_components seeded its agent: the deep ResNet's
                # update at 9x its cost on denormal floats, a ratio of 2.70): a third timing decides, each component
                # its median of three.
                third, _ = components.time(args.seconds)
                costs = {k: sorted((before[k], after[k], third[k]))[1] for k in before}
                limits += f", again {cores / sum(third.values()):9,.0f} (median of three)"
        limit = cores / sum(costs.values())
        budget = int(limit * args.e2e_seconds * 0.6)  # frames for the runs below: about --e2e-seconds each
        cap = layout_cap(costs, cfg, cores)
        shape = (
            f"A={cfg.num_actors} E={cfg.envs} T={cfg.unroll_length} B={cfg.batch_size}, {cfg.inference} inference"
            + (", bf16 learner" if cfg.learner_precision == "bf16" else "")
            + (", compiled learner" if cfg.compile_learner else "")
        )
        line = (
            f"{name:22s} {shape} | core-us/frame: "
            + " ".join(f"{k} {v * 1e6:7.1f}" for k, v in costs.items())
            + f" ({stepper}) | {limits} | limit {limit:9,.0f} fps | pronghorn {measured:9,.0f} fps | ratio {measured / limit:.3f} (layout cap {cap:.2f})"
        )
        row = f"| {name} ({shape}) | {costs['env'] * 1e6:.1f} ({stepper}) | {costs['inference'] * 1e6:.1f} | {costs['learner'] * 1e6:.1f} | {limit:,.0f} | {measured:,.0f} | {measured / limit:.3f} | {cap:.2f} |"
        if args.inference == "both":
            other = "central" if cfg.inference == "actor" else "actor"
            alt_cfg = setting(name, inference=other)
            alt_limit = limit
            if args.interleave:  # its own ratio: to the limit timed in its own pauses
                alt, alt_costs, _, _ = trained_in_turns(alt_cfg, components)
                alt_limit = cores / sum(alt_costs.values())
            else:
                alt = end_to_end(alt_cfg, frames)
                torch.set_num_threads(1)
            alt_cap = layout_cap(costs, alt_cfg, cores)  # central: the server's one thread answers every actor
            line += f" | {other} inference {alt:9,.0f} fps (ratio {alt / alt_limit:.3f}, layout cap {alt_cap:.2f}, {alt / measured:.2f}x the default)"
            row += f" {other}: {alt:,.0f}, {alt / alt_limit:.3f} (cap {alt_cap:.2f}) |"
        if args.deterministic_cost:
            lockstep = end_to_end(setting(name, deterministic=True, inference="actor"), budget)
            torch.set_num_threads(1)
            line += f" | --deterministic {lockstep:9,.0f} fps ({lockstep / measured:.2f}x)"
        print(line if args.repeats == 1 else f"round {rnd + 1}: {line}", flush=True)
        if args.runtime == "ray" and rnd == 0:
            print(f"{name:22s} {ray_comparison(cfg, budget)}", flush=True)
        return measured / limit, row

    names = args.only or DEFAULT_SETTINGS
    rounds: dict[str, list[tuple[float, str]]] = {name: [] for name in names}
    for rnd in range(args.repeats):  # every setting once per round, so the machine's drift spreads over all of them
        for name in names:
            rounds[name].append(measure(name, rnd))
    for name in names:
        _, row = sorted(rounds[name])[len(rounds[name]) // 2]  # the median round's row (the upper one of an even count)
        table.append(row if args.repeats == 1 else row + " " + " / ".join(f"{r:.3f}" for r, _ in rounds[name]) + " |")
    # Three decimals: the aims (0.85 in the best configurations, 0.7 with the defaults) are thresholds, and two
    # decimals printed a round of 0.848 as 0.85.
    print("\nratio = pronghorn's training frames/s (learner-consumed, steady state) / component limit\n")
    print("\n".join(table))
    if args.readme:
        write_table(
            args.readme,
            "throughput",
            "benchmarks/throughput.py",
            table,
            ("" if args.repeats == 1 else f", {args.repeats} rounds, the settings in turn, each row the median round")
            + (
                f", the limit timed in {args.interleave} pauses of each run (--interleave {args.interleave})"
                if args.interleave
                else ", the limit timed before and after each run"
            ),
        )


if __name__ == "__main__":
    main()
