"""Play a trained agent from a checkpoint: per-level return and length statistics, optionally an MP4.

Evaluation always steps Gymnasium environments (the same preprocessing as training on either backend)
because only they can render the frames for a video.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pronghorn import checkpoint, suites
from pronghorn.config import BEFORE_IT_EXISTED, Config, ConfigError, resolved
from pronghorn.envs import probe
from pronghorn.envs.batch import GymBatch
from pronghorn.envs.single import make_single
from pronghorn.logs import Evaluation, Logger
from pronghorn.losses import clip_rewards
from pronghorn.models import build_agent

log = logging.getLogger("pronghorn")

_MAX_PARALLEL = 8


def load_run(logdir: str, path: str | None) -> tuple[Config, str, dict[str, Any]]:
    """The run's config and a checkpoint (the newest good one unless `path` names one)."""
    try:
        with open(os.path.join(logdir, "config.json")) as f:
            cfg = Config(**{**BEFORE_IT_EXISTED, **json.load(f)})  # a run older than a flag ran without it
    except FileNotFoundError:
        raise ConfigError(f"{logdir!r} has no config.json: point --logdir at a pronghorn run folder") from None
    if path is not None:
        try:
            return cfg, path, checkpoint.load(path)
        except ValueError as exc:
            raise ConfigError(f"{exc}: pass another --checkpoint") from None
    latest, state = checkpoint.load_latest(logdir)
    if state is None or latest is None:
        raise ConfigError(f"{logdir!r} holds no usable checkpoint: train first, or pass --checkpoint")
    return cfg, latest, state


def _make_env(level: str, seed: int, cfg: Config, render_mode: str | None) -> gym.Env:
    return make_single(level, seed, cfg, render_mode=render_mode)


def _summary(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()), "max": float(a.max())}


@torch.no_grad()
def evaluate(logdir: str, checkpoint_path: str | None = None, episodes: int = 30, greedy: bool = False, video: str | None = None, seed: int = 10_000) -> dict:
    """Run `episodes` whole games per level; returns the JSON-ready summary."""
    # Rendering to arrays needs no display or sound; keep SDL (classic control) from probing for them.
    for key, value in (("SDL_VIDEODRIVER", "dummy"), ("SDL_AUDIODRIVER", "dummy"), ("PYGAME_HIDE_SUPPORT_PROMPT", "1")):
        os.environ.setdefault(key, value)
    if episodes < 1:
        raise ConfigError(f"--episodes is {episodes}: it must be at least 1")
    cfg, path, state = load_run(logdir, checkpoint_path)
    torch.manual_seed(seed)
    results: dict[str, dict[str, Any]] = {}
    for index, level in enumerate(cfg.level_names):
        spec = probe(level, cfg)
        agent = build_agent(cfg, spec.obs_shape, spec.num_actions)
        agent.load_state_dict(state["learner"]["agent"])
        agent.eval()
        n = min(episodes, _MAX_PARALLEL)
        render_mode = "rgb_array" if video is not None and level == cfg.level_names[0] else None
        env = GymBatch(
            level,
            functools.partial(_make_env, cfg=cfg, render_mode=render_mode),
            [seed + j for j in range(n)],
            spec.frames_per_step,
            cfg.episodic_life,
        )
        quota = [math.ceil(episodes / n)] * n  # every env plays its share: no bias toward short games
        returns: list[float] = []
        lengths: list[int] = []
        writer = open_video(video, fps=15 if spec.frames_per_step == 4 else 50) if render_mode and video else None
        try:
            out = env.reset()
            done = np.ones(n, dtype=bool)  # the first observation starts an episode
            last_action = torch.zeros(n, dtype=torch.long)
            core = agent.initial_state(n)
            level_t = torch.full((n,), index, dtype=torch.int64)
            while len(returns) < episodes:
                reward = clip_rewards(torch.from_numpy(out.reward), cfg.reward_clipping)
                # The core state is carried across steps and reset (inside the agent) where done.
                agent_out, core = agent(
                    torch.from_numpy(out.obs)[None], last_action[None], reward[None], torch.from_numpy(done)[None], core, greedy=greedy, level=level_t
                )
                last_action = agent_out.action[0]
                if writer is not None:
                    writer.append_data(env.render(0))
                out = env.step(last_action.numpy())
                if writer is not None and out.episode_end[0]:
                    writer.close()  # the video shows env 0's first whole game
                    writer = None
                done = out.terminated | out.truncated
                for j in np.flatnonzero(out.episode_end):
                    if quota[j] > 0 and len(returns) < episodes:
                        quota[j] -= 1
                        returns.append(float(out.episode_return[j]))
                        lengths.append(int(out.episode_frames[j]))
        finally:
            if writer is not None:
                writer.close()
            env.close()
        results[level] = {"episodes": len(returns), "return": _summary(returns), "length_frames": _summary(lengths)}
        hns = suites.human_normalized(level, results[level]["return"]["mean"])
        if hns is not None:
            results[level]["human_normalized"] = hns
    summary: dict[str, Any] = {"checkpoint": path, "frames": int(state["learner"]["frames"]), "greedy": greedy, "levels": results}
    if len(results) > 1:  # the suite figures training logs: mean over levels, and HNS when every level has one
        summary["suite"] = {"mean_return": sum(r["return"]["mean"] for r in results.values()) / len(results)}
        per_level = {lv: float(r["human_normalized"]) for lv, r in results.items() if "human_normalized" in r}
        if len(per_level) == len(results):
            summary["suite"].update(suites.suite_summary(per_level))
    if video is not None:
        summary["video"] = video
    return summary


def open_video(path: str, fps: int):
    """An H.264 MP4 writer through imageio-ffmpeg, whose wheel ships the ffmpeg binary."""
    import imageio.v2 as imageio

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return imageio.get_writer(path, fps=fps, codec="libx264", macro_block_size=1, quality=7)


class PeriodicEvaluation:
    """--eval-every for the training loop: when a checkpoint is due for evaluation, and what comes back.

    Results go to every log sink (eval.csv, TensorBoard at the checkpoint's frames, the console) and into
    the next metrics row as eval/frames and eval/<level>/return (NaN in rows without a new result, so the
    columns exist from the first row on)."""

    def __init__(self, cfg: Config, logdir: str, frames: int):
        from pronghorn.runtime.evaluator import Evaluator

        self._every = cfg.eval_every
        self._levels = cfg.level_names
        self._evaluator = Evaluator(logdir, cfg.eval_episodes, cfg.eval_video, seed=cfg.seed + 10_000, actor_nice=resolved(cfg.actor_nice, "actor_nice"))
        self.next_due = (frames // self._every + 1) * self._every
        self._unsent: int | None = None  # frames of a due evaluation skipped while another ran
        self._latest: Evaluation | None = None

    def due(self, frames: int) -> bool:
        return frames >= self.next_due

    def submit(self, checkpoint_path: str, frames: int) -> None:
        """Hand the checkpoint written at a due point to the evaluation process (skipped, with a warning, if busy)."""
        self.next_due = (frames // self._every + 1) * self._every
        if self._evaluator.submit(checkpoint_path, frames):
            self._unsent = None
        else:
            self._unsent = frames
            log.warning("evaluation at %s frames skipped: the previous one is still running (raise --eval-every or lower --eval-episodes)", f"{frames:,}")

    def collect(self, logger: Logger, wait: float = 0.0) -> None:
        for result in self._evaluator.poll(wait):
            if result.error:
                log.warning("evaluation of the checkpoint at %s frames failed: %s", f"{result.frames:,}", result.error)
                continue
            logger.evaluation(result)
            self._latest = result

    def row(self) -> dict[str, float]:
        """eval/* columns for a metrics row: the newest result since the last row, NaN otherwise."""
        latest, self._latest = self._latest, None
        nan = float("nan")
        row = {"eval/frames": float(latest.frames) if latest else nan}
        for level in self._levels:
            row[f"eval/{level}/return"] = latest.returns.get(level, nan) if latest else nan
        return row

    def finish(self, logger: Logger, save: Callable[[], str], frames: int, timeout: float) -> None:
        """End of training: collect the evaluation in flight, then evaluate the last due checkpoint if it was skipped."""
        self.collect(logger, wait=timeout)
        if self._unsent is not None:
            self.submit(save(), frames)
            self.collect(logger, wait=timeout)

    def close(self) -> None:
        self._evaluator.close()
