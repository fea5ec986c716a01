"""Typed records for what flows through the system: env -> actor -> slot -> batch -> learner.

Time convention, used everywhere (the place people get wrong):
  row t of an unroll holds what the agent saw at time t and what it did there:
    obs[t]                 observation at t
    reward[t], terminated[t], truncated[t]
                           came back with obs[t]; they belong to the action taken at t-1
    action[t], policy_logits[t]
                           chosen by the behaviour policy from obs[t]
  so the transition (obs[t], action[t]) is paid reward[t+1] and ends the episode if done[t+1].
  Row 0 of an unroll repeats row T of the actor's previous unroll.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class EnvOutput(NamedTuple):
    """One step of E environments, as numpy arrays with leading dim E.

    Where an episode ended (terminated or truncated), `obs` is already the first observation of the next
    episode and `final_obs` holds the last observation of the ended one (needed to bootstrap a truncation).
    """

    obs: np.ndarray  # [E, *obs_shape]
    reward: np.ndarray  # [E] float32, raw (unclipped)
    terminated: np.ndarray  # [E] bool; with episodic life also set on a lost life
    truncated: np.ndarray  # [E] bool; time limit: the episode could have gone on
    final_obs: np.ndarray  # [E, *obs_shape]; differs from obs only where truncated
    episode_end: np.ndarray  # [E] bool; a whole game ended (statistics below are valid)
    episode_return: np.ndarray  # [E] float32; raw score of the whole game (all lives)
    episode_frames: np.ndarray  # [E] int32; its length in environment frames


class AgentOutput(NamedTuple):
    """What the agent returns for each input step: tensors with leading dims [T, B] or [B]."""

    policy_logits: torch.Tensor  # [..., A]
    baseline: torch.Tensor  # [...]
    action: torch.Tensor  # [...] int64


class PolicyAnswer(NamedTuple):
    """The policy's answer to one step of an actor's E environments (from its own agent or the inference server).

    numpy arrays, like EnvOutput: the actor hands the action to the env and writes the rest into the slot's
    numpy views, with no torch call on its per-step path (docs/throughput_log.md, "The actor's step without torch")."""

    action: np.ndarray  # [E] int64, chosen from obs[t]
    policy_logits: np.ndarray  # [E, A] float32
    core_before: np.ndarray  # [2, E, H] float32: the core state before obs[t] was processed
    truncation_value: np.ndarray  # [E] float32: V(final_obs) where the step truncated an episode, else 0
    version: int  # learner version of the weights that answered


class Unroll(NamedTuple):
    """One slot: an actor's unrolls for its E environments, time-major.

    Fields with T+1 rows are indexed by time; `core_state`, `policy_version` and `level` describe the
    unroll as a whole. Every field keeps the environment dim at position 1, so a batch is the
    concatenation of slots along dim 1.
    """

    obs: torch.Tensor  # [T+1, E, *obs_shape]
    reward: torch.Tensor  # [T+1, E] float32
    terminated: torch.Tensor  # [T+1, E] bool
    truncated: torch.Tensor  # [T+1, E] bool
    truncation_value: torch.Tensor  # [T+1, E] float32; V(final_obs) where truncated, by the behaviour policy
    episode_end: torch.Tensor  # [T+1, E] bool
    episode_return: torch.Tensor  # [T+1, E] float32
    episode_frames: torch.Tensor  # [T+1, E] int32
    last_action: torch.Tensor  # [T+1, E] int64; the action that led to obs[t] (0 at an episode start)
    action: torch.Tensor  # [T+1, E] int64
    policy_logits: torch.Tensor  # [T+1, E, A] float32
    core_state: torch.Tensor  # [2, E, H] float32; LSTM (h, c) before row 0 (H=1 and unused without LSTM)
    policy_version: torch.Tensor  # [1, E] int64; learner version of the weights that acted
    level: torch.Tensor  # [1, E] int64; index into Config.level_names


FieldLayout = tuple[tuple[int, ...], np.dtype]  # (shape, numpy dtype) of one Unroll field


def unroll_spec(
    unroll_length: int, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: np.dtype | type, num_actions: int, core_size: int
) -> tuple[FieldLayout, ...]:
    """Shapes and dtypes of one slot: a (shape, numpy dtype) pair per Unroll field, in Unroll._fields order."""
    t1, e = unroll_length + 1, num_envs
    layout: dict[str, FieldLayout] = dict(
        obs=((t1, e, *obs_shape), np.dtype(obs_dtype)),
        reward=((t1, e), np.dtype(np.float32)),
        terminated=((t1, e), np.dtype(np.bool_)),
        truncated=((t1, e), np.dtype(np.bool_)),
        truncation_value=((t1, e), np.dtype(np.float32)),
        episode_end=((t1, e), np.dtype(np.bool_)),
        episode_return=((t1, e), np.dtype(np.float32)),
        episode_frames=((t1, e), np.dtype(np.int32)),
        last_action=((t1, e), np.dtype(np.int64)),
        action=((t1, e), np.dtype(np.int64)),
        policy_logits=((t1, e, num_actions), np.dtype(np.float32)),
        core_state=((2, e, max(1, core_size)), np.dtype(np.float32)),
        policy_version=((1, e), np.dtype(np.int64)),
        level=((1, e), np.dtype(np.int64)),
    )
    return tuple(layout[name] for name in Unroll._fields)


def zeros_unroll(layout: tuple[FieldLayout, ...]) -> Unroll:
    """An Unroll of zero-filled CPU tensors with the given layout."""
    return Unroll(*(torch.from_numpy(np.zeros(shape, dtype)) for shape, dtype in layout))


def packed_unroll(layout: tuple[FieldLayout, ...]) -> tuple[torch.Tensor, Unroll]:
    """One zero-filled byte buffer holding a whole slot, and the Unroll of typed views into it.

    A slot that is one block moves as one copy (the Ray runtime ships unrolls this way) instead of one
    copy per field. Each field starts on an 8-byte boundary so every view is aligned for its dtype."""
    offsets, size = [], 0
    for shape, dtype in layout:
        offsets.append(size)
        size += -(-int(np.prod(shape)) * dtype.itemsize // 8) * 8
    flat = torch.zeros(size, dtype=torch.uint8)
    views = []
    for (shape, dtype), offset in zip(layout, offsets):
        nbytes = int(np.prod(shape)) * dtype.itemsize
        views.append(flat[offset : offset + nbytes].view(torch.from_numpy(np.zeros(0, dtype)).dtype).view(shape))
    return flat, Unroll(*views)
