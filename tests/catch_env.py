"""Catch on pixels: a small image task for learning tests of the CNN path (uint8 frames, /255, conv torso).

A ball falls one row per step from a random column of a 10x10 grid; the paddle on the bottom row moves
left, stays or moves right. When the ball reaches the bottom row the episode ends with +1 if the paddle
is under it, else -1 (a random policy scores about -0.6). The grid is drawn as a 1x40x40 uint8 image
(4x4 pixels per cell), large enough for IMPALA's shallow network. Credit for the final reward must flow
back 9 steps, across unroll boundaries when T is short: a time-alignment or bootstrap bug shows here.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np

GRID, SCALE = 10, 4


class PixelCatch(gym.Env):
    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (1, GRID * SCALE, GRID * SCALE), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self._rng = np.random.default_rng()

    def _obs(self) -> np.ndarray:
        grid = np.zeros((GRID, GRID), np.uint8)
        grid[self._ball_row, self._ball_col] = 255
        grid[GRID - 1, self._paddle] = 128
        return np.kron(grid, np.ones((SCALE, SCALE), np.uint8))[None]

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._ball_row, self._ball_col = 0, int(self._rng.integers(GRID))
        self._paddle = int(self._rng.integers(GRID))
        return self._obs(), {}

    def step(self, action):
        self._paddle = int(np.clip(self._paddle + int(action) - 1, 0, GRID - 1))
        self._ball_row += 1
        done = self._ball_row == GRID - 1
        reward = (1.0 if self._paddle == self._ball_col else -1.0) if done else 0.0
        return self._obs(), reward, done, False, {}


def make_catch(render_mode=None) -> gym.Env:
    return PixelCatch()
