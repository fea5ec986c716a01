"""Gymnasium's numpy-vectorised CartPole, stepped in the actor's own thread.

For an env whose step costs microseconds, a hand-off to another thread (envpool's C++ worker) costs more
than the step: here envpool's CartPole took about twice the CPU per step of Gymnasium's `CartPoleVectorEnv`,
which steps all E environments in a few numpy operations with no thread in between.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from pronghorn.envs.batch import empty_output
from pronghorn.records import EnvOutput

# What same-step reset touches in Gymnasium's CartPoleVectorEnv (state [4, E], step counts, its pending-reset flags).
_NEEDS = ("state", "steps", "prev_done", "np_random", "low", "high")


class _ActionCheck:
    """The vector env's action space, with the membership test its step asserts every call done in one reduction.

    `CartPoleVectorEnv.step` asserts `action_space.contains(actions)`: five numpy calls, 7-17 % of its
    step of 16 envs here. This keeps the check (an integer array of the batch's shape, each in [0, n)) but
    reads the actions as unsigned, so a negative one is huge and one `max` covers both bounds.
    """

    def __init__(self, space: Any):
        uniform = bool((space.nvec == space.nvec.flat[0]).all() and not space.start.any())
        self.space, self.n = space, int(space.nvec.flat[0]) if uniform else None  # CartPole: Discrete(2) per env

    def contains(self, x: Any) -> bool:
        if self.n is None or not (isinstance(x, np.ndarray) and x.shape == self.space.shape and x.dtype.kind in "iu"):
            return bool(self.space.contains(x))
        return bool(x.view(np.dtype(f"u{x.dtype.itemsize}")).max() < self.n)

    def __getattr__(self, name: str) -> Any:  # sample, seed, shape, nvec, ...: the space's own
        return getattr(self.space, name)


class VectorBatch:
    """E environments of one CartPole id in one Gymnasium vector env; the batch is seeded with seeds[0]."""

    def __init__(self, level: str, seeds: list[int]):
        import warnings

        import gymnasium as gym

        self.level = level
        self.num_envs = len(seeds)
        self.failures = 0  # numpy arithmetic does not fail; kept for the BatchedEnv interface
        self._seed = seeds[0]
        with warnings.catch_warnings():  # its own observation space's float64 bounds, cast to float32: nothing to act on
            warnings.simplefilter("ignore", UserWarning)
            self._vec = gym.make_vec(level, num_envs=self.num_envs, vectorization_mode="vector_entry_point")
        self._env: Any = self._vec.unwrapped  # a CartPoleVectorEnv, whose state _reset_now writes (checked in reset)
        self._env.action_space = cast(Any, _ActionCheck(self._env.action_space))  # duck-typed: mypy knows only Space
        space = self._vec.single_observation_space
        self._out = empty_output(self.num_envs, space.shape, space.dtype)
        self._returns = np.zeros(self.num_envs, np.float64)  # each env's return so far (CartPole has no lives)

    def reset(self) -> EnvOutput:
        obs, _ = self._vec.reset(seed=self._seed)
        missing = [name for name in _NEEDS if getattr(self._env, name, None) is None]
        if missing:  # another Gymnasium's vector CartPole: say so rather than step it wrongly
            raise RuntimeError(f"Gymnasium's vector {self.level} has no {', '.join(missing)} to reset in the same step: use --env-backend envpool or gymnasium")
        out = self._out
        out.obs[:] = obs
        for field in (out.reward, out.terminated, out.truncated, out.episode_end):
            field[:] = 0
        self._returns[:] = 0.0
        return out

    def step(self, actions: np.ndarray) -> EnvOutput:
        # Every array the vector env returns is new each step, so they are handed on without a copy
        # (valid until the next call, as BatchedEnv promises): each numpy call here costs ~2 us, over 1 % of the
        # step at E=128, so the bookkeeping below is kept to a few calls.
        obs, reward, terminated, truncated, _ = self._vec.step(actions)
        done = terminated | truncated
        returns = self._returns
        returns += reward  # all envs in one vector operation, as envpool's classic control does
        out = self._out
        time_limit = truncated > terminated  # truncated and not terminated: a time limit where the pole still stood
        if done.any():
            ended = np.flatnonzero(done)
            out.episode_return[ended] = returns[ended]
            out.episode_frames[ended] = self._env.steps[ended]  # the env counts its episode's steps (1 frame each)
            returns[ended] = 0.0
            out.final_obs[ended] = obs[ended]  # the learner bootstraps a time limit from V(final_obs)
            obs[ended] = self._reset_now(ended)
        return out._replace(obs=obs, reward=reward, terminated=terminated, truncated=time_limit, episode_end=done)

    def _reset_now(self, ended: np.ndarray) -> np.ndarray:
        """The first observations of the next episodes of envs `ended`, drawn now.

        Gymnasium's vector CartPole would reset them on the *next* step, ignoring that step's action and
        paying it no reward; pronghorn's unrolls need the new episode's first observation in the step that
        ended the old one. So this draws it as that reset would (uniform in [low, high] from the env's own
        generator) and clears the env's pending reset, so its next step moves from the new state.
        """
        env = self._env
        first = env.np_random.uniform(low=env.low, high=env.high, size=(env.state.shape[0], ended.size))  # [4, n]
        env.state[:, ended] = first
        env.steps[ended] = 0
        env.prev_done.fill(False)  # its step just set prev_done = terminated | truncated: every one is reset now
        return first.T  # [n, 4], cast to float32 where it is written, as the env's own observations are

    def close(self) -> None:
        self._vec.close()
