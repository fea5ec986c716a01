"""One Gymnasium environment, with IMPALA's Atari preprocessing for ALE ids."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from pronghorn import suites
from pronghorn.config import Config
from pronghorn.envs.minatar import make_minatar

_ale_registered = False


def is_atari(level: str) -> bool:
    return level.startswith("ALE/")


def uses_full_action_set(cfg: Config) -> bool:
    """Several Atari games share one policy head only through the full 18-action set (as IMPALA's
    multi-task agent did); a single game keeps its minimal set. Both backends ask here."""
    return sum(map(is_atari, cfg.level_names)) > 1


def custom_factory(level: str):
    """For `module:factory` (a callable returning a gymnasium.Env), the callable; None for a registered id.

    `module:Env-v0` keeps Gymnasium's meaning (import the module, which registers the id)."""
    if ":" not in level:
        return None
    module_name, name = level.split(":", 1)
    import importlib

    module = importlib.import_module(module_name)  # ImportError becomes a ConfigError in probe
    if name in gym.registry:
        return None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise gym.error.Error(f"{module_name} has no callable {name!r} and no registered environment of that id")
    return factory


# ALE's 18 actions in order; ALE's "full" set for Skiing has only the 9 without FIRE (FIRE does nothing there).
FULL_ACTIONS = (
    "NOOP",
    "FIRE",
    "UP",
    "RIGHT",
    "LEFT",
    "DOWN",
    "UPRIGHT",
    "UPLEFT",
    "DOWNRIGHT",
    "DOWNLEFT",
    "UPFIRE",
    "RIGHTFIRE",
    "LEFTFIRE",
    "DOWNFIRE",
    "UPRIGHTFIRE",
    "UPLEFTFIRE",
    "DOWNRIGHTFIRE",
    "DOWNLEFTFIRE",
)


class FullActionSet(gym.ActionWrapper):
    """All 18 actions for a game whose legal set is smaller: each maps to its legal form without FIRE."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        legal = list(env.unwrapped.get_action_meanings())  # type: ignore[attr-defined]  # ale-py's AtariEnv, which gym.Env does not declare
        without_fire = [m.replace("FIRE", "") or "NOOP" for m in FULL_ACTIONS]  # "FIRE" alone becomes NOOP
        self._map = [legal.index(m) if m in legal else 0 for m in without_fire]
        self.action_space = gym.spaces.Discrete(len(FULL_ACTIONS))

    def action(self, action: int) -> int:
        return self._map[int(action)]


def make_single(level: str, seed: int, cfg: Config, render_mode: str | None = None) -> gym.Env:
    """Make one environment. It is seeded by its first `reset(seed=...)`, which GymBatch does."""
    factory = custom_factory(level)
    if factory is not None:
        return factory(render_mode=render_mode) if render_mode else factory()
    if suites.minatar_game(level):
        # Pad to the most channels among the run's MinAtar levels, so they all share one agent.
        games = [g for g in map(suites.minatar_game, (*cfg.level_names, level)) if g]
        return make_minatar(level, max(suites.MINATAR_CHANNELS[g] for g in games), render_mode)
    if not is_atari(level):
        # The passive checker only validates the first calls but stays a wrapper layer on every step.
        kwargs: dict[str, Any] = {"render_mode": render_mode} if render_mode else {}  # custom envs may not take the argument
        return gym.make(level, disable_env_checker=True, **kwargs)
    global _ale_registered
    if not _ale_registered:
        import ale_py

        gym.register_envs(ale_py)
        _ale_registered = True
    # Action repeat lives in the wrapper (frameskip=1 here) so it can max-pool the last two frames;
    # sticky actions still apply per emulator frame, as in ALE v5.
    full = uses_full_action_set(cfg)
    env = gym.make(level, frameskip=1, repeat_action_probability=cfg.sticky_actions, full_action_space=full, render_mode=render_mode)
    if full and int(env.action_space.n) < len(FULL_ACTIONS):  # type: ignore[attr-defined]  # Atari's space is Discrete
        env = FullActionSet(env)
    # Life loss is handled in GymBatch (it ends the training episode, not the game), so it is off here.
    env = gym.wrappers.AtariPreprocessing(env, noop_max=cfg.noop_max, frame_skip=4, screen_size=84, terminal_on_life_loss=False, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)
