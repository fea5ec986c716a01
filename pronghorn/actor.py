"""The actor: steps E environments with a recent copy of the policy and writes unrolls into slots.

It knows nothing of processes or shared memory: it gets slot indices from a `SlotSource`, hands filled
ones to a `SlotSink`, and refreshes its weights from a `WeightSource`. `runtime/` wires these to
queues and shared memory (or anything else).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from pronghorn.acting import Acting
from pronghorn.config import Config, resolved
from pronghorn.envs import EnvSpec, make_batched
from pronghorn.flat import flat_holder
from pronghorn.losses import clip_rewards
from pronghorn.models import build_agent
from pronghorn.records import PolicyAnswer, Unroll

log = logging.getLogger("pronghorn.actor")


class SlotSource(Protocol):
    def get(self) -> int | None:
        """A free slot index, or None when training is stopping."""


class SlotSink(Protocol):
    def put(self, index: int) -> None: ...


class WeightSource(Protocol):
    @property
    def version(self) -> int: ...

    def load_into(self, model: torch.nn.Module, timeout: float) -> int:
        """Copy the newest weights into `model`'s parameters in place (views of them stay valid); their version."""

    def load_version(self, model: torch.nn.Module, version: int, timeout: float) -> int:
        """--deterministic: wait for `version`, then copy exactly it into `model` in place."""


def actor_seeds(cfg: Config, index: int) -> list[int]:
    """Env j of actor i is seeded seed + i*E + j (actor i's own seed is seed + i)."""
    return [cfg.seed + index * cfg.envs + j for j in range(cfg.envs)]


def env_levels(cfg: Config, index: int) -> list[int]:
    """The level (index into cfg.level_names) of each of actor i's E environments.

    With at least as many actors as levels, actor i plays levels[i % L] in all its environments, as in
    IMPALA. With fewer actors (N < L), env j of actor i plays levels[(i + j*N) % L]: the global env
    numbers i + j*N run through 0 .. N*E-1 without gaps, so every level is played once N*E >= L.
    """
    n, num_levels = cfg.num_actors, len(cfg.level_names)
    if n >= num_levels:
        return [index % num_levels] * cfg.envs
    return [(index + j * n) % num_levels for j in range(cfg.envs)]


def actor_label(cfg: Config, index: int) -> str:
    """What actor i plays, for process names and messages."""
    names = sorted({cfg.level_names[lv] for lv in env_levels(cfg, index)})
    return names[0] if len(names) == 1 else f"{names[0]} +{len(names) - 1} levels"


class _Step:
    """What the actor knows at time t: the env output and the policy's answer to it."""

    def __init__(self, env_out, last_action, answer: PolicyAnswer):
        self.env_out = env_out
        self.last_action = last_action  # [E] int64 numpy: action that led to obs[t]
        self.answer = answer  # action and logits chosen from obs[t]; core_before: the core state before obs[t]


class Policy(Protocol):
    """Answers an actor's observations, step by step, carrying the recurrent core state between calls.

    `LocalPolicy` runs the actor's own copy of the agent; the inference server's client
    (runtime/inference.py) sends the step to one batched agent in the learner process.
    """

    def answer(self, env_out, last_action: np.ndarray) -> PolicyAnswer: ...

    def refresh(self) -> None:
        """Between unrolls: take newer weights if there are any."""


class LocalPolicy:
    """The actor's own CPU copy of the agent (--inference actor)."""

    def __init__(self, index: int, cfg: Config, spec: EnvSpec, weights: WeightSource):
        self.cfg, self.weights = cfg, weights
        levels = env_levels(cfg, index)
        self.agent = build_agent(cfg, spec.obs_shape, spec.num_actions)
        self.agent.eval()
        # Its parameters as views of one tensor, as the learner's are, and newer weights loaded into that
        # tensor: one copy between unrolls, without walking the agent's modules for each parameter (CartPole's
        # defaults: 117 us of an actor's 1.8 ms of CPU per unroll went to loading them, in the run).
        self._flat = flat_holder(self.agent)
        self.version = weights.load_into(self._flat, cfg.timeout)
        self.acting = Acting(self.agent, cfg.envs)
        self.core = self.agent.initial_state(cfg.envs)  # the state after the last observation answered
        self._core_placeholder = self.core.numpy()  # without LSTM the core state never changes: its numpy view, once
        self._level = torch.as_tensor(levels, dtype=torch.int64)  # [E]: selects each env's PopArt statistics
        # Actor i samples from its own generator (seed + i), as the inference server does for it: the same
        # weights and observations give the same actions in both modes.
        self._generator = np.random.default_rng(cfg.seed + index)

    def answer(self, env_out, last_action: np.ndarray) -> PolicyAnswer:
        uniform = self._generator.random((self.cfg.envs, 1), dtype=np.float32)
        truncation_value = np.zeros(self.cfg.envs, np.float32)
        rows = final_obs = None
        if env_out.truncated.any():
            # A time limit cut these episodes at final_obs: the learner bootstraps from V(final_obs), which the
            # step computes in the same pass, with the core state from before the reset (gone after it).
            rows = np.flatnonzero(env_out.truncated)
            final_obs = env_out.final_obs[rows]
        # The answer views the acting step's buffers until the next call: the loop copies it into the slot
        # (and hands the action to the env) before it asks again.
        if self.acting.mode == "numpy":
            # The MLP's step without a torch call: torch calls between numpy env steps cost the actor more than
            # their own time (docs/throughput_log.md, "The actor's step without torch"). Its core state is a placeholder.
            action, logits, values = self.acting.numpy_answer(env_out.obs, uniform, final_obs)
            core_before = self._core_placeholder
        else:
            reward = done = None  # only the LSTM core reads them; building them is measurable per step
            if self.agent.use_lstm:
                done = torch.from_numpy(env_out.terminated | env_out.truncated)
                reward = clip_rewards(torch.from_numpy(env_out.reward), self.cfg.reward_clipping)
            cut = None if rows is None else torch.from_numpy(rows)
            final = None if final_obs is None else torch.from_numpy(final_obs)
            out, core, cut_values = self.acting(
                torch.from_numpy(env_out.obs), torch.from_numpy(last_action), reward, done, self.core, self._level, torch.from_numpy(uniform), cut, final
            )
            action, logits, values = out.action.numpy(), out.policy_logits.numpy(), None if cut_values is None else cut_values.numpy()
            # obs[t] was reached by action[t-1]; the agent answered it from the core state after obs[t-1].
            core_before = self.core.numpy() if self.agent.use_lstm else self._core_placeholder
            self.core = core
        if values is not None:
            truncation_value[rows] = values  # in the order of `rows`
        return PolicyAnswer(action, logits, core_before, truncation_value, self.version)

    def refresh(self) -> None:
        if self.weights.version != self.version:
            self.version = self.weights.load_into(self._flat, self.cfg.timeout)

    def load_version(self, version: int) -> None:
        """--deterministic: act with exactly this version."""
        self.version = self.weights.load_version(self._flat, version, self.cfg.timeout)


def _write_row(buf: Any, t: int, step: _Step, truncation_value: np.ndarray) -> None:
    """Write row t of a slot. `buf` holds numpy views of the slot: numpy assignment is cheaper per call."""
    env = step.env_out
    buf.obs[t] = env.obs
    buf.reward[t] = env.reward
    buf.terminated[t] = env.terminated
    buf.truncated[t] = env.truncated
    buf.truncation_value[t] = truncation_value
    buf.episode_end[t] = env.episode_end
    buf.episode_return[t] = env.episode_return
    buf.episode_frames[t] = env.episode_frames
    buf.last_action[t] = step.last_action
    buf.action[t] = step.answer.action
    buf.policy_logits[t] = step.answer.policy_logits


def lockstep_update(cfg: Config, unroll: int) -> int:
    """--deterministic: the update that an actor's unroll number `unroll` feeds.

    Each update takes the same number of unrolls from every actor: batch_slots / num_actors; with replay,
    only the first batch is all fresh (the ring then holds a batch) and later ones take fresh_slots / num_actors."""
    first = max(1, cfg.batch_slots // cfg.num_actors)
    if not cfg.replay_fraction or unroll < first:
        return unroll // first
    return 1 + (unroll - first) // max(1, cfg.fresh_slots // cfg.num_actors)


def run_actor(
    index: int,
    cfg: Config,
    spec: EnvSpec,
    slots: list[Unroll],
    free: SlotSource,
    full: SlotSink,
    weights: WeightSource,
    counters: np.ndarray,
    should_stop: Callable[[], bool],
    policy: Policy | None = None,
) -> None:
    """Produce unrolls until `free.get()` returns None or `should_stop()`.

    counters: this actor's row of shared int64 counters (env_failures, unrolls, steps).
    policy: who answers the observations; by default the actor's own copy of the agent (`LocalPolicy`).
    """
    levels = env_levels(cfg, index)
    env = make_batched([cfg.level_names[lv] for lv in levels], actor_seeds(cfg, index), cfg)
    torch.manual_seed(cfg.seed + index)
    if policy is None:
        policy = LocalPolicy(index, cfg, spec, weights)
    E, T = cfg.envs, resolved(cfg.unroll_length, "unroll_length")
    views: list[Any] = [Unroll._make(t.numpy() for t in slot) for slot in slots]  # the slots' memory seen through numpy: Unrolls of arrays
    levels_row = np.asarray(levels, np.int64)

    env_out = env.reset()
    env_out.terminated[:] = True  # the first observation starts an episode (resets the core, zeroes inputs)
    last_action = np.zeros(E, np.int64)
    step = _Step(env_out, last_action, policy.answer(env_out, last_action))
    row0_truncation = np.zeros(E, np.float32)
    reported_failures = 0
    # Lock-step: this actor's unroll n feeds update lockstep_update(cfg, n) = k and is made with the weights
    # of the update before that one (version k-1 for update k): a policy lag of exactly one.
    unroll = 0
    try:
        while not should_stop():
            slot = free.get()
            if slot is None:
                return
            if cfg.deterministic:
                assert isinstance(policy, LocalPolicy), "--deterministic needs --inference actor (Config refuses central)"
                policy.load_version(max(0, lockstep_update(cfg, unroll) - 1))
            else:
                # The newest weights as the unroll starts, after any wait for its slot: on Ray the request that
                # hands the slot in brings them, and a refresh before it arrived would take the older ones.
                policy.refresh()
            unroll += 1
            buf = views[slot]
            buf.core_state[:] = step.answer.core_before
            buf.level[0] = levels_row
            # Row 0 repeats the previous unroll's last row, so every transition lies inside one unroll.
            _write_row(buf, 0, step, row0_truncation)
            version = None  # the oldest weights that chose an action of rows 1..T: the unroll's policy version
            for t in range(1, T + 1):
                action = step.answer.action
                env_out = env.step(action)
                # obs[t] was reached by action[t-1]; the policy answers it (and V(final_obs) where truncated).
                step = _Step(env_out, action, policy.answer(env_out, action))
                _write_row(buf, t, step, step.answer.truncation_value)
                version = step.answer.version if version is None else min(version, step.answer.version)
            buf.policy_version[:] = version
            row0_truncation = step.answer.truncation_value
            counters[0] += env.failures - reported_failures  # a replaced actor adds to its predecessor's count
            reported_failures = env.failures
            counters[1] += 1
            counters[2] += T * E
            full.put(slot)  # the slot now belongs to the learner until staging hands it back
    finally:
        env.close()
