"""Test environments, importable in spawned actors as `tests.flaky_env:<Id>` (gymnasium imports the module)."""

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class FlakyCartPole(CartPoleEnv):
    """CartPole whose step raises every `fail_every` steps (counted per env instance)."""

    def __init__(self, fail_every: int = 150, **kwargs):
        super().__init__(**kwargs)
        self.fail_every = fail_every
        self.calls = 0

    def step(self, action):
        self.calls += 1
        if self.calls % self.fail_every == 0:
            raise RuntimeError(f"injected failure at call {self.calls}")
        return super().step(action)


class BrokenReset(CartPoleEnv):
    """Every reset raises, so recreating it cannot help: the actor must give up and report."""

    def reset(self, **kwargs):
        raise RuntimeError("reset is broken")


class LivesEnv(gym.Env):
    """A 3-life game: each life lasts 4 steps paying reward 1 per step; the game ends with the last life."""

    observation_space = gym.spaces.Box(0, 10, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.lives, self.t = 3, 0
        return np.zeros(1, np.float32), {"lives": self.lives}

    def step(self, action):
        self.t += 1
        if self.t % 4 == 0:
            self.lives -= 1
        return np.full(1, self.t, np.float32), 1.0, self.lives == 0, False, {"lives": self.lives}


class NaNRewardCartPole(CartPoleEnv):
    """CartPole whose rewards turn NaN after `good_steps` steps of an env (a sensor gone bad)."""

    def __init__(self, good_steps: int = 1500, **kwargs):
        super().__init__(**kwargs)
        self.good_steps, self.calls = good_steps, 0

    def step(self, action):
        self.calls += 1
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, (float("nan") if self.calls > self.good_steps else reward), terminated, truncated, info


class SegfaultingCartPole(CartPoleEnv):
    """Kills its own process (as a segfault in native env code would) after `steps` steps."""

    def __init__(self, steps: int = 300, **kwargs):
        super().__init__(**kwargs)
        self.steps, self.calls = steps, 0

    def step(self, action):
        self.calls += 1
        if self.calls > self.steps:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


gym.register("SegfaultingCartPole-v0", entry_point=SegfaultingCartPole, max_episode_steps=500)
gym.register("SegfaultingEarlyCartPole-v0", entry_point=SegfaultingCartPole, kwargs={"steps": 5}, max_episode_steps=500)  # dies before its first unroll
gym.register("NaNRewardCartPole-v0", entry_point=NaNRewardCartPole, max_episode_steps=500)
gym.register("AlwaysFailing-v0", entry_point=FlakyCartPole, kwargs={"fail_every": 1}, max_episode_steps=500)
gym.register("FlakyCartPole-v0", entry_point=FlakyCartPole, max_episode_steps=500)
gym.register("FlakyCartPole1000-v0", entry_point=FlakyCartPole, kwargs={"fail_every": 1000}, max_episode_steps=500)
gym.register("BrokenReset-v0", entry_point=BrokenReset, max_episode_steps=500)
gym.register("Lives-v0", entry_point=LivesEnv)
gym.register("ShortCartPole-v0", entry_point=CartPoleEnv, max_episode_steps=5)


# Factories for `--env tests.flaky_env:<factory>` (custom environments that are not registered).
class _WrongDtype(CartPoleEnv):
    def step(self, action):
        obs, *rest = super().step(action)
        return (obs.astype(np.float64), *rest)


class _WrongShape(CartPoleEnv):
    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        return obs[:3], info


def make_cartpole():
    return gym.wrappers.TimeLimit(CartPoleEnv(), 500)


def make_wrong_dtype():
    return _WrongDtype()


def make_wrong_shape():
    return _WrongShape()
