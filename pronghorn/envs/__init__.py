"""Environments: any Gymnasium id, Atari with IMPALA's preprocessing, stepped E at a time.

`make_batched(level, seeds, cfg)` returns a `BatchedEnv` whose `step(actions)` returns an `EnvOutput`
with same-step auto-reset; `probe(level, cfg)` reads the spaces once, in the parent, and turns an
unknown id into a ConfigError.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from pronghorn.config import Config, ConfigError
from pronghorn.envs.batch import BatchedEnv, GymBatch
from pronghorn.envs.single import is_atari, make_single

log = logging.getLogger("pronghorn.envs")

__all__ = ["BatchedEnv", "EnvSpec", "is_atari", "make_batched", "probe", "probe_levels"]


class EnvSpec(NamedTuple):
    """What the rest of the system needs to know about a level."""

    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_actions: int
    frames_per_step: int  # environment frames per agent step (4 for Atari's action repeat)
    reward_threshold: float | None


def make_batched(levels: str | Sequence[str], seeds: list[int], cfg: Config) -> BatchedEnv:
    """E environments, env j of level levels[j] (or all of `levels`) seeded seeds[j], on the configured backend."""
    levels = [levels] * len(seeds) if isinstance(levels, str) else list(levels)
    backend = cfg.backend_for(levels)
    if backend == "vector" and is_atari(levels[0]):
        from pronghorn.envs.ale_vector import AtariVectorBatch

        assert len(set(levels)) == 1, "ale-py's vector env steps one level per actor (Config refuses fewer actors than levels)"
        return AtariVectorBatch(levels[0], seeds, cfg)
    if backend == "vector":
        from pronghorn.envs.vector import VectorBatch

        return VectorBatch(levels[0], seeds)
    if backend == "envpool":
        from pronghorn.envs.envpool_batch import EnvpoolBatch

        assert len(set(levels)) == 1, "envpool steps one level per pool (Config refuses fewer actors than levels)"
        return EnvpoolBatch(levels[0], seeds, cfg)
    return GymBatch(levels, lambda level, seed: make_single(level, seed, cfg), seeds, frames_per_step(levels[0]), cfg.episodic_life, cfg.max_env_failures)


def frames_per_step(level: str) -> int:
    return 4 if is_atari(level) else 1


def check_outputs(level: str, env, obs_space, seed: int) -> None:
    """One reset and one step must return what the spaces promise; a mismatch names the field."""

    def check_obs(obs, where: str) -> None:
        obs = np.asarray(obs)
        if obs.shape != obs_space.shape:
            raise ConfigError(
                f"environment {level!r} returned an observation of shape {obs.shape} from {where}, but its observation_space has shape {obs_space.shape}: make them agree"
            )
        if obs.dtype != obs_space.dtype:
            raise ConfigError(
                f"environment {level!r} returned an observation of dtype {obs.dtype} from {where}, but its observation_space says {obs_space.dtype}: make them agree (e.g. obs.astype(np.{obs_space.dtype}))"
            )

    result = env.reset(seed=seed)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ConfigError(f"environment {level!r}: reset() must return (observation, info) as in Gymnasium, got {type(result).__name__}")
    check_obs(result[0], "reset()")
    result = env.step(env.action_space.sample())
    if not (isinstance(result, tuple) and len(result) == 5):
        raise ConfigError(
            f"environment {level!r}: step() must return (observation, reward, terminated, truncated, info), got {type(result).__name__} of {len(result) if isinstance(result, tuple) else 1}"
        )
    obs, reward, terminated, truncated, _ = result
    check_obs(obs, "step()")
    if not np.isscalar(reward) or not np.isreal(reward):
        raise ConfigError(f"environment {level!r} returned reward {reward!r} from step(): it must be a real number")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ConfigError(f"environment {level!r} returned {name}={flag!r} ({type(flag).__name__}) from step(): it must be a bool")


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
        if isinstance(obs_space, gym.spaces.Box) and isinstance(act_space, gym.spaces.Discrete):
            try:
                check_outputs(level, env, obs_space, cfg.seed)
            except ConfigError:
                raise
            except Exception as exc:  # a flaky env is the actors' business (recreate, count, limit)
                log.warning("could not check what %s returns at start-up (%r); its failures will be handled in the actors", level, exc)
    finally:
        env.close()
    if not isinstance(act_space, gym.spaces.Discrete):
        raise ConfigError(f"environment {level!r} has action space {act_space}: pronghorn's agents need a Discrete action space")
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(f"environment {level!r} has observation space {obs_space}: pronghorn's agents need a Box observation space")
    if is_atari(level):
        threshold = None  # ALE ids carry no meaningful threshold; Atari runs stop at --total-frames
    return EnvSpec(tuple(obs_space.shape), np.dtype(obs_space.dtype), int(act_space.n), frames_per_step(level), threshold)


def probe_levels(cfg: Config) -> EnvSpec:
    """Probe every level of the run; they must share one agent (observation, actions, frames per step).

    Returns the shared spec; its reward threshold is kept only if every level has the same one.
    """
    names = cfg.level_names
    first = probe(names[0], cfg)
    thresholds = {first.reward_threshold}
    for level in names[1:]:
        spec = probe(level, cfg)
        thresholds.add(spec.reward_threshold)
        for what, a, b in (
            ("observation shape", first.obs_shape, spec.obs_shape),
            ("observation dtype", first.obs_dtype, spec.obs_dtype),
            ("number of actions", first.num_actions, spec.num_actions),
            ("frames per step", first.frames_per_step, spec.frames_per_step),
        ):
            if a != b:
                raise ConfigError(
                    f"levels {names[0]} ({what} {a}) and {level} ({what} {b}) cannot share one agent: "
                    f"train them in separate runs, or pick levels with the same spaces"
                )
    return first._replace(reward_threshold=first.reward_threshold if len(thresholds) == 1 else None)
