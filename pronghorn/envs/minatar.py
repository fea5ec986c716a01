"""MinAtar games (Young & Tian 2019) as channel-first uint8 grids, padded so one agent serves the suite.

`MinAtar/<Game>-v0` uses all 6 actions (the suite's shared action set); `-v1` the game's minimal set.
Each game has its own number of object channels (4 to 10); `channels` pads with always-empty channels
to a common count, so every game of a run shows the agent the same [C, 10, 10] observation.
"""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np


class MinAtarGrid(gym.ObservationWrapper):
    """[10, 10, C] bool -> [channels, 10, 10] uint8 (0/1), the game's channels first, then zeros."""

    def __init__(self, env: gym.Env, channels: int):
        super().__init__(env)
        shape = env.observation_space.shape
        assert shape is not None  # a Box
        h, w, c = shape
        if channels < c:
            raise ValueError(f"cannot pad {c} channels down to {channels}")
        self._c = c
        self._buf = np.zeros((channels, h, w), np.uint8)
        self.observation_space = gym.spaces.Box(0, 1, (channels, h, w), np.uint8)

    def observation(self, obs: np.ndarray) -> np.ndarray:
        out = self._buf.copy()  # a fresh array: callers may keep the observation
        # transpose, not np.moveaxis: the same view, without moveaxis's Python-level axis checks, which
        # cost several times the copy on a 10x10 grid, at every step of every env.
        out[: self._c] = obs.transpose(2, 0, 1)
        return out


def make_minatar(level: str, channels: int, render_mode=None) -> gym.Env:
    """One MinAtar game from its `MinAtar/<Game>-v0|v1` id, padded to `channels`."""
    from minatar.gym import BaseEnv  # ImportError here becomes "install minatar" in probe

    match = re.fullmatch(r"MinAtar/(\w+)-v([01])", level)
    if match is None:
        raise gym.error.Error(f"{level} is not a MinAtar id: use MinAtar/<Game>-v0 (all 6 actions) or -v1 (the game's own)")
    # Made directly, not through gym.make: the registry would warn on every v0 that a v1 exists.
    game = re.sub(r"(?<!^)(?=[A-Z])", "_", match.group(1)).lower()  # SpaceInvaders -> space_invaders
    env = BaseEnv(game=game, render_mode=render_mode, use_minimal_action_set=match.group(2) == "1")
    return MinAtarGrid(env, channels)
