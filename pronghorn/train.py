"""The builder: wires env -> actors -> slots/queues -> staging -> learner -> weights back, on one machine."""

from __future__ import annotations

import collections
import logging
import os
import time
from typing import NamedTuple, Optional

import torch

from pronghorn import checkpoint
from pronghorn.config import Config, ConfigError
from pronghorn.envs import probe
from pronghorn.learner import Learner
from pronghorn.logs import Episode, standard_logger
from pronghorn.models import Agent
from pronghorn.records import Unroll
from pronghorn.runtime import LocalRuntime
from pronghorn.staging import Staging

log = logging.getLogger("pronghorn")


class TrainResult(NamedTuple):
    logdir: str
    frames: int
    learner_steps: int
    episodes: int
    mean_return: float  # mean of the last (up to) 100 episodes; nan if none finished
    wall_time: float
    checkpoint: Optional[str]
    solved: bool
    interrupted: bool


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def prepare_logdir(cfg: Config) -> str:
    logdir = cfg.resolved_logdir(time.strftime("%Y%m%d-%H%M%S"))
    try:
        os.makedirs(logdir, exist_ok=True)
        with open(os.path.join(logdir, "config.json"), "w") as f:
            f.write(cfg.to_json() + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write to logdir {logdir!r} ({exc.strerror}): pass a writable --logdir") from None
    return logdir


def finished_episodes(batch: Unroll, frames: int, levels: tuple[str, ...], now: float) -> list[Episode]:
    """Games that ended inside this batch. Row 0 repeats the previous unroll's last row, so it is skipped."""
    ended = batch.episode_end[1:].nonzero().tolist()
    if not ended:
        return []
    returns, lengths, level = batch.episode_return[1:].cpu(), batch.episode_frames[1:].cpu(), batch.level[0].cpu()
    return [Episode(frames, levels[int(level[b])], float(returns[t, b]), int(lengths[t, b]), now) for t, b in ended]


class _Interval:
    """Accumulates per-step metrics between two log lines."""

    def __init__(self, frames: int):
        self.reset(frames)

    def reset(self, frames: int) -> None:
        self.start, self.frames, self.steps = time.perf_counter(), frames, 0
        self.sums: dict[str, float] = collections.defaultdict(float)
        self.lag_min, self.lag_max = float("inf"), float("-inf")

    def add(self, metrics: dict[str, float], wait_s: float, stage_s: float) -> None:
        self.steps += 1
        for key, value in metrics.items():
            self.sums[key] += value
        self.sums["learner_wait_s"] += wait_s
        self.sums["stage_s"] += stage_s
        self.lag_min = min(self.lag_min, metrics["policy_lag_min"])
        self.lag_max = max(self.lag_max, metrics["policy_lag_max"])

    def summary(self, frames: int) -> dict[str, float]:
        dt = max(1e-9, time.perf_counter() - self.start)
        row = {"fps": (frames - self.frames) / dt, "learner_steps_per_s": self.steps / dt}
        row.update({key: value / max(1, self.steps) for key, value in self.sums.items()})
        row["policy_lag_min"], row["policy_lag_max"] = self.lag_min, self.lag_max
        return row


def train(cfg: Config) -> TrainResult:
    """Train until --total-frames (or the return target); returns where everything went."""
    spec = probe(cfg.env, cfg)
    cfg = cfg.for_observations(image=len(spec.obs_shape) == 3)
    logdir = prepare_logdir(cfg)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.learner_threads or max(1, (os.cpu_count() or 1) - cfg.num_actors))
    device = resolve_device(cfg.device)
    agent = Agent(spec.obs_shape, spec.num_actions, cfg.model, cfg.lstm, cfg.hidden_size).to(device)
    learner = Learner(cfg, agent, spec.frames_per_step)
    target = cfg.stop_at_return if cfg.stop_at_return is not None else spec.reward_threshold
    num_params = sum(p.numel() for p in agent.parameters())

    runtime = LocalRuntime(cfg, spec, num_params, agent.core_size)
    logger = standard_logger(logdir, cfg.total_frames, cfg.progress)
    staging: Optional[Staging] = None
    recent: collections.deque[float] = collections.deque(maxlen=100)
    episodes = 0
    solved = interrupted = False
    saved: Optional[str] = None
    start = time.time()
    try:
        runtime.weights.publish(agent, learner.steps)  # version 0: actors start from the initial weights
        runtime.start()
        staging = Staging(
            runtime.unroll_slots(), runtime.full_queue, runtime.free_queue, cfg.batch_slots, device, cfg.timeout,
            runtime.check_health, lambda: f"{runtime.alive()}/{cfg.num_actors} actors alive",
        )
        interval = _Interval(0)
        last_log = last_ckpt = time.monotonic()
        while learner.frames < cfg.total_frames:
            staged = staging.next()
            metrics = learner.step(staged.data)
            runtime.weights.publish(agent, learner.steps)  # weights back to the actors
            done = finished_episodes(staged.data, learner.frames, cfg.levels, time.time())
            logger.episodes(done)
            episodes += len(done)
            recent.extend(e.episode_return for e in done)
            interval.add(metrics, staged.wait_s, staged.stage_s)
            now = time.monotonic()
            if now - last_log >= cfg.log_interval:
                runtime.check_health()  # staging only checks while it waits; a dead actor must not go unnoticed
                row = interval.summary(learner.frames)
                row.update(
                    time=time.time() - start, learner_steps=learner.steps, full_queue_occupancy=runtime.full_occupancy(), env_failures=runtime.env_failures(),
                    episodes=episodes, mean_return_100=sum(recent) / len(recent) if recent else float("nan"),
                )
                logger.metrics(learner.frames, row)
                interval.reset(learner.frames)
                last_log = now
            if now - last_ckpt >= cfg.checkpoint_secs:
                saved = checkpoint.save(logdir, learner.state_dict(), learner.frames)
                last_ckpt = now
            if target is not None and len(recent) == recent.maxlen and sum(recent) / len(recent) >= target:
                solved = True
                break
    except KeyboardInterrupt:
        interrupted = True
        log.warning("interrupted: stopping actors and saving a checkpoint")
    finally:
        if staging is not None:
            staging.close()
        runtime.close()
        if learner.steps:
            saved = checkpoint.save(logdir, learner.state_dict(), learner.frames)
        logger.close()
    return TrainResult(
        logdir, learner.frames, learner.steps, episodes, sum(recent) / len(recent) if recent else float("nan"),
        time.time() - start, saved, solved, interrupted,
    )
