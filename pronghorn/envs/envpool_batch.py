"""envpool (C++ batches, no per-env Python loop): Atari with the same preprocessing and semantics as the
ale-py path, and the classic-control ids (CartPole, Acrobot, MountainCar) with Gymnasium's dynamics."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from pronghorn.config import Config
from pronghorn.envs.batch import EpisodeTracker, empty_output
from pronghorn.envs.single import uses_full_action_set
from pronghorn.records import EnvOutput

log = logging.getLogger("pronghorn.envs")

# ALE v5 caps a game at 108,000 emulator frames, i.e. 27,000 agent steps with action repeat 4.
MAX_EPISODE_STEPS = 27_000


class EnvpoolBatch:
    """E environments of one level in one envpool pool. Seeds: envpool gives env j `seed + j`, matching GymBatch."""

    def __init__(self, level: str, seeds: list[int], cfg: Config):
        self.level = level
        self.num_envs = len(seeds)
        self.failures = 0
        self._in_a_row = 0
        self._seed = seeds[0]
        self._cfg = cfg
        self._atari = level.startswith("ALE/")
        self._pool = self._make(self._seed)
        space = self._single_space()
        self._out = empty_output(self.num_envs, space.shape, space.dtype)
        self._stats = EpisodeTracker(self.num_envs, 4 if self._atari else 1, cfg.episodic_life and self._atari)
        self._no_lives = np.zeros(self.num_envs, np.int64)

    def _make(self, seed: int):
        import envpool

        common: dict[str, Any] = dict(num_envs=self.num_envs, batch_size=self.num_envs, seed=seed, num_threads=1)
        if not self._atari:  # classic control: Gymnasium's dynamics and time limits, nothing to configure
            return envpool.make(self.level, env_type="gymnasium", **common)
        game = self.level.split("/", 1)[1]  # "ALE/Pong-v5" -> "Pong-v5"
        return envpool.make(
            game,
            env_type="gymnasium",
            **common,
            frame_skip=4,
            stack_num=4,
            img_height=84,
            img_width=84,
            gray_scale=True,
            # envpool draws the no-op count from [0, noop_max - 1] and crashes (SIGSEGV) on 0: +1 gives
            # [0, noop_max], "up to --noop-max" as on the ale-py path, and makes --noop-max 0 work.
            noop_max=self._cfg.noop_max + 1,
            repeat_action_probability=self._cfg.sticky_actions,
            # Life loss is handled by EpisodeTracker from info["lives"], exactly as for ale-py.
            episodic_life=False,
            reward_clip=False,  # the learner clips; statistics need raw scores
            use_fire_reset=False,  # ale-py's AtariPreprocessing does not press FIRE either
            max_episode_steps=MAX_EPISODE_STEPS,
            full_action_space=uses_full_action_set(self._cfg),
        )

    def _single_space(self):
        return self._pool.observation_space  # envpool's is one env's

    def _lives(self, info) -> np.ndarray:
        return info["lives"] if self._atari else self._no_lives

    def _reset_pool(self) -> tuple[np.ndarray, dict]:
        return self._pool.reset()  # seeded when the pool was made

    def _step_pool(self, actions: np.ndarray):
        return self._pool.step(actions)

    def _last_obs(self, obs: np.ndarray, info: dict, done: np.ndarray) -> np.ndarray:
        """The observations that ended the episodes of positions `done` (envpool returns them as obs)."""
        return obs[done]

    def _begin_next_episodes(self, done_ids: np.ndarray, done: np.ndarray, info: dict) -> None:
        """envpool would reset these on the *next* step; resetting now gives same-step semantics."""
        new_obs, new_info = self._pool.reset(done_ids.astype(np.int32))
        self._out.obs[new_info["env_id"]] = new_obs
        for j, lives in zip(new_info["env_id"], self._lives(new_info)):
            self._stats.restart(j, lives)

    def reset(self) -> EnvOutput:
        obs, info = self._reset_pool()
        out = self._out
        out.obs[info["env_id"]] = obs
        for j, lives in zip(info["env_id"], self._lives(info)):
            self._stats.restart(j, lives)
        for field in (out.reward, out.terminated, out.truncated, out.episode_end):
            field[:] = 0
        return out

    def step(self, actions: np.ndarray) -> EnvOutput:
        out, stats = self._out, self._stats
        try:
            obs, reward, terminated, truncated, info = self._step_pool(actions.astype(np.int32, copy=False))
        except Exception as exc:  # the pool is recreated, its games abandoned
            self.failures += 1
            self._in_a_row += 1
            if self._in_a_row >= self._cfg.max_env_failures:
                raise RuntimeError(
                    f"envpool {self.level} failed {self._in_a_row} times in a row (--max-env-failures {self._cfg.max_env_failures}): {exc!r}"
                ) from exc
            log.warning("envpool %s raised %r; recreating the pool (env failures so far: %d)", self.level, exc, self.failures)
            self._pool.close()
            self._pool = self._make(self._seed + 1_000_003 * self.failures)
            self.reset()
            out.terminated[:] = True
            return out
        self._in_a_row = 0
        ids = info["env_id"]
        ended = terminated | truncated
        lost = stats.step_all(reward, self._lives(info), ids)
        out.obs[ids] = obs
        out.reward[ids] = reward
        out.truncated[ids] = truncated & ~terminated
        out.terminated[ids] = terminated | (lost & ~ended)  # a life lost: the training episode ends, the game goes on
        out.episode_end[:] = False
        done = np.flatnonzero(ended)
        if done.size:
            done_ids = ids[done]
            out.episode_end[done_ids] = True
            out.episode_return[done_ids] = stats.returns[done_ids]
            out.episode_frames[done_ids] = stats.frames[done_ids]
            out.final_obs[done_ids] = self._last_obs(obs, info, done)  # the learner bootstraps a time limit from V(final_obs)
            self._begin_next_episodes(done_ids, done, info)
        return out

    def close(self) -> None:
        self._pool.close()
