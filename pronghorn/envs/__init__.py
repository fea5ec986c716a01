"""Environments: any Gymnasium id, Atari with IMPALA's preprocessing, stepped E at a time.

`make_batched(level, seeds, cfg)` returns a `BatchedEnv` whose `step(actions)` returns an `EnvOutput`
with same-step auto-reset; `probe(level, cfg)` reads the spaces once, in the parent, and turns an
unknown id into a ConfigError.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from pronghorn.config import Config, ConfigError
from pronghorn.envs.batch import BatchedEnv, GymBatch
from pronghorn.envs.single import is_atari, make_single

__all__ = ["BatchedEnv", "EnvSpec", "make_batched", "probe", "is_atari"]


class EnvSpec(NamedTuple):
    """What the rest of the system needs to know about a level."""

    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_actions: int
    frames_per_step: int  # environment frames per agent step (4 for Atari's action repeat)
    reward_threshold: Optional[float]


def make_batched(level: str, seeds: list[int], cfg: Config) -> BatchedEnv:
    """E environments of `level`, env j seeded seeds[j], on the configured backend."""
    if cfg.env_backend == "envpool":
        from pronghorn.envs.envpool_batch import EnvpoolBatch

        return EnvpoolBatch(level, seeds, cfg)
    return GymBatch(level, lambda seed: make_single(level, seed, cfg), seeds, frames_per_step(level), cfg.episodic_life, cfg.max_env_failures)


def frames_per_step(level: str) -> int:
    return 4 if is_atari(level) else 1


def probe(level: str, cfg: Config) -> EnvSpec:
    """Create one environment of `level` to read its spaces; unknown ids become a one-line ConfigError."""
    import gymnasium as gym

    try:
        env = make_single(level, cfg.seed, cfg)
    except gym.error.Error as exc:
        raise ConfigError(f"unknown environment {level!r} ({exc}): pass a registered Gymnasium id such as CartPole-v1 or ALE/Pong-v5") from None
    except ImportError as exc:
        raise ConfigError(f"environment {level!r} needs a package that is not installed ({exc}): install it or pick another --env") from None
    try:
        obs_space, act_space = env.observation_space, env.action_space
        threshold = env.spec.reward_threshold if env.spec is not None else None
    finally:
        env.close()
    if not isinstance(act_space, gym.spaces.Discrete):
        raise ConfigError(f"environment {level!r} has action space {act_space}: pronghorn's agents need a Discrete action space")
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(f"environment {level!r} has observation space {obs_space}: pronghorn's agents need a Box observation space")
    if is_atari(level):
        threshold = None  # ALE ids carry no meaningful threshold; Atari runs stop at --total-frames
    return EnvSpec(tuple(obs_space.shape), np.dtype(obs_space.dtype), int(act_space.n), frames_per_step(level), threshold)
