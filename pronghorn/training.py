"""The builder: wires env -> actors -> slots/queues -> staging -> learner -> weights back, on one machine.

A logdir that holds a checkpoint is resumed: learner, optimizer, frame count, RNG states and the recent
per-level returns come back from it, and the logs continue from its frame count.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import random
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from pronghorn import checkpoint
from pronghorn.config import Config, ConfigError
from pronghorn.envs import EnvSpec, probe_levels
from pronghorn.evaluate import PeriodicEvaluation
from pronghorn.learner import Learner
from pronghorn.logs import Episode, LogWriteError, standard_logger
from pronghorn.models import Agent, build_agent
from pronghorn.plot import write_curve
from pronghorn.records import Unroll
from pronghorn.replay import ReplayRing, build_ring, unroll_priorities
from pronghorn.rundir import prepare_logdir
from pronghorn.runtime import LocalRuntime
from pronghorn.runtime.tuning import learner_thread_count, limit_threads
from pronghorn.staging import Staging
from pronghorn.stats import LevelStats

if TYPE_CHECKING:
    from pronghorn.runtime.ray_runtime import RayRuntime

log = logging.getLogger("pronghorn")

# A resumed run's actors draw new seeds (seed + i + generation * stride) so they do not replay the
# random streams of the run before the restart.
_SEED_STRIDE = 100_003


class NonFiniteError(RuntimeError):
    """Too many updates in a row had a non-finite loss or gradient."""


class TrainResult(NamedTuple):
    logdir: str
    frames: int
    learner_steps: int
    episodes: int
    mean_return: float  # mean of the last (up to) 100 episodes; nan if none finished
    wall_time: float
    checkpoint: str | None
    solved: bool
    interrupted: bool
    resumed_from: str | None
    curve: str  # where the return curve was drawn, or why it was not


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def finished_episodes(batch: Unroll, frames: int, levels: tuple[str, ...], now: float, fresh: int = -1) -> list[Episode]:
    """Games that ended inside this batch's fresh columns [0, fresh) (-1: all; replayed games were counted
    when they were fresh). Row 0 repeats the previous unroll's last row, so it is skipped."""
    columns = slice(None) if fresh < 0 else slice(0, fresh)
    # Read in numpy (host views; a device batch is copied over first): the handful of small reads cost
    # less than torch's dispatch for them, called once per update (CartPole, 16 columns, one game: 19 -> 8 us).
    # Flat indices, not ended.nonzero(): its (t, b) pair cost 18 us on CartPole's best [20, 512] batch, and
    # flatnonzero 2 (row-major, so still in (t, b) order).
    ended = batch.episode_end.cpu().numpy()[1:, columns]
    at = np.flatnonzero(ended)
    if not len(at):
        return []
    returns = batch.episode_return.cpu().numpy()[1:, columns].ravel()[at].tolist()
    lengths = batch.episode_frames.cpu().numpy()[1:, columns].ravel()[at].tolist()
    names = [levels[lv] for lv in batch.level.cpu().numpy()[0, columns][at % ended.shape[1]].tolist()]
    return list(map(Episode, itertools.repeat(frames), names, returns, lengths, itertools.repeat(now)))


class _Interval:
    """Accumulates per-step metrics between two log lines: `*_min` and `*_max` keys keep their extreme,
    the rest their mean; NaN (a figure with nothing to measure in that step) is left out."""

    def __init__(self, frames: int):
        self.reset(frames)

    def reset(self, frames: int) -> None:
        self.start, self.frames, self.steps = time.perf_counter(), frames, 0
        self.sums: dict[str, float] = collections.defaultdict(float)
        self.counts: dict[str, int] = collections.defaultdict(int)
        self.extremes: dict[str, float] = {}

    def add(self, metrics: dict[str, float], wait_s: float, stage_s: float) -> None:
        self.steps += 1
        for key, value in {**metrics, "learner_wait_s": wait_s, "stage_s": stage_s}.items():
            if value != value:  # NaN
                self.sums[key] += 0.0  # the column exists from the first row on
                continue
            if key.endswith("_min") or key.endswith("_max"):
                pick = min if key.endswith("_min") else max
                self.extremes[key] = pick(self.extremes.get(key, value), value)
            self.sums[key] += value
            self.counts[key] += 1

    def summary(self, frames: int) -> dict[str, float]:
        dt = max(1e-9, time.perf_counter() - self.start)
        row = {"fps": (frames - self.frames) / dt, "learner_steps_per_s": self.steps / dt}
        for key, total in self.sums.items():
            row[key] = self.extremes.get(key, total / self.counts[key] if self.counts[key] else float("nan"))
        return row


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def _make_runtime(cfg: Config, spec: EnvSpec, num_params: int, core_size: int, device: torch.device) -> LocalRuntime | RayRuntime:
    """The actors' runtime, not yet started (start() spawns the actors; they wait for the first weights)."""
    if cfg.runtime == "ray":
        from pronghorn.runtime.ray_runtime import RayRuntime

        return RayRuntime(cfg, spec, num_params, core_size)
    return LocalRuntime(cfg, spec, num_params, core_size, device)


def _cpu_has_bf16() -> bool:
    """Whether oneDNN runs bfloat16 natively on this CPU (PyTorch's own check; private, so a missing one counts as yes)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True


def _check_precision(cfg: Config, device: torch.device) -> None:
    """--learner-precision bf16 on this device: refused on a GPU without bf16, warned about on a CPU without it."""
    if cfg.learner_precision != "bf16":
        return
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("--learner-precision bf16: this GPU has no bfloat16 (compute capability 8.0 or later has it): use --learner-precision fp32")
    if device.type == "cpu" and not _cpu_has_bf16():
        log.warning(
            "--learner-precision bf16: this CPU has no native bfloat16 (AVX512-BF16 or AMX), so the learner's products run emulated and slower than fp32; use --learner-precision fp32 here"
        )


def _check_compile(cfg: Config, device: torch.device) -> None:
    """--compile-learner: torch.compile's inductor builds C++ on CPU and Triton kernels on CUDA, so what
    it builds with must be there; checked here, before any actor starts, not at the first compiled update."""
    if not cfg.compile_learner:
        return
    if device.type == "cuda":
        import importlib.util

        if importlib.util.find_spec("triton") is None:
            raise ConfigError("--compile-learner on CUDA needs Triton for torch.compile (not installed): pip install triton or drop --compile-learner")
    else:
        from torch._inductor import cpp_builder

        try:
            cpp_builder.get_cpp_compiler()  # the search inductor itself runs (g++ or $CXX), raising when none is found
        except Exception:
            raise ConfigError("--compile-learner on CPU needs a C++ compiler for torch.compile (none found): install g++ or drop --compile-learner") from None
    log.info("--compile-learner: the learner's second update compiles its pass (5-30 s; torch caches it for later runs)")


def _build_learner(cfg: Config, agent: Agent, spec: EnvSpec, saved: dict | None, resumed_from: str | None) -> Learner:
    """The learner over `agent`, restored from `saved` when resuming."""
    learner = Learner(cfg, agent, spec.frames_per_step)
    if saved is not None:
        try:
            learner.load_state_dict(saved["learner"])
        except (RuntimeError, KeyError, ValueError) as exc:
            detail = " ".join(str(exc).split())  # PyTorch lists every mismatch on its own line
            detail = detail if len(detail) <= 240 else detail[:237] + "..."
            raise ConfigError(f"checkpoint {resumed_from} does not fit this agent ({detail}): use the run's flags or --restart") from None
        _set_rng_state(saved["rng"])
        log.info("resumed from %s at %d frames, learner step %d", resumed_from, learner.frames, learner.steps)
    return learner


def _restore_ring(ring: ReplayRing | None, cfg: Config, saved: dict | None, resumed_from: str | None) -> None:
    """Say what the replay ring holds, and refill it from `saved` when the run checkpoints it."""
    if ring is not None:
        log.info(
            "replay: %d of every %d unrolls from a ring of %s unrolls (%s MiB)",
            cfg.replay_columns,
            cfg.batch_size,
            f"{ring.capacity:,}",
            f"{ring.nbytes / 2**20:,.1f}",
        )
        if cfg.checkpoint_replay:
            log.warning("--checkpoint-replay: every checkpoint holds the ring, %s MiB", f"{ring.nbytes / 2**20:,.1f}")
        if saved is not None and cfg.checkpoint_replay and saved.get("replay") is not None:
            try:
                ring.load_state_dict(saved["replay"])
            except ValueError as exc:
                raise ConfigError(f"checkpoint {resumed_from}: {exc}; use the run's flags or --restart") from None
            log.info("replay ring restored: %s unrolls", f"{ring.size:,}")


def train(cfg: Config) -> TrainResult:
    """Train until --total-frames (or the return target); returns where everything went."""
    spec = probe_levels(cfg)
    cfg = cfg.for_observations(spec.obs_shape)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    device = resolve_device(cfg.device)
    limit_threads(learner_thread_count(cfg, on_cpu=device.type == "cpu", cores=os.cpu_count() or 1))
    if cfg.deterministic or torch.are_deterministic_algorithms_enabled():
        # Only when it changes something: the call imports torch._dynamo, about 2 s of every start-up.
        torch.use_deterministic_algorithms(cfg.deterministic)
    _check_precision(cfg, device)  # before any actor starts
    _check_compile(cfg, device)
    try:
        agent = build_agent(cfg, spec.obs_shape, spec.num_actions).to(device)
    except ValueError as exc:  # a --model that does not fit the observations: bad input, not a crash
        raise ConfigError(str(exc)) from None
    # The refusals that need no run (bad flags, a replay ring too large) come before a new logdir is made, so
    # they leave no half-made run behind; only those about the run found there (resume conflicts, a checkpoint that does not fit) come after.
    ring = build_ring(cfg, spec.obs_shape, spec.obs_dtype, spec.num_actions, agent.core_size)
    logdir, resumed_from, saved = prepare_logdir(cfg)
    stats = LevelStats(cfg.level_names, saved["stats"] if saved else None)
    num_params = sum(p.numel() for p in agent.parameters())
    actor_cfg = dataclasses.replace(cfg, seed=cfg.seed + stats.generation * _SEED_STRIDE)
    _restore_ring(ring, cfg, saved, resumed_from)
    runtime = _make_runtime(actor_cfg, spec, num_params, agent.core_size, device)
    try:
        runtime.start()
        # While the actors import torch and make their environments (seconds), the learner is built: its
        # optimizer alone imports torch._dynamo, about 2 s. The actors wait for the weights published below.
        learner = _build_learner(cfg, agent, spec, saved, resumed_from)
        extra_sinks = []
        if cfg.wandb:
            from pronghorn.wandb_sink import WandbSink

            extra_sinks.append(WandbSink(cfg, logdir))
        logger = standard_logger(logdir, cfg.total_frames, cfg.progress, learner.frames, stats.recent_returns(), extra_sinks)
    except BaseException:
        runtime.close()  # no actor or segment outlives a failed start
        raise
    target = cfg.stop_at_return if cfg.stop_at_return is not None else spec.reward_threshold

    def save() -> str:
        unlogged: LogWriteError | None = None
        try:
            logger.flush()  # episodes.csv holds every game the checkpoint counts: a resumed run keeps those rows
        except LogWriteError as exc:
            unlogged = exc  # raised once the checkpoint is written: the logs failing is no reason to lose it
        state: dict[str, Any] = {"config": dataclasses.asdict(cfg), "learner": learner.state_dict(), "rng": _rng_state(), "stats": stats.state_dict()}
        if cfg.checkpoint_replay and staging is not None:
            state["replay"] = staging.replay_state()
        path = checkpoint.save(logdir, state, learner.frames, cfg.keep_checkpoints)
        if unlogged is not None:
            raise unlogged
        return path

    staging: Staging | None = None
    evaluation: PeriodicEvaluation | None = None
    solved = interrupted = False
    saved_path: str | None = None
    final_error: Exception | None = None
    start = time.time()
    try:
        runtime.weights.publish(agent, learner.steps, flat=learner.flat)  # actors start from the current (resumed) weights
        if cfg.eval_every:
            evaluation = PeriodicEvaluation(cfg, logdir, learner.frames)
        staging = Staging(
            runtime.unroll_slots(),
            runtime.router,
            runtime.router,
            cfg.batch_slots,
            device,
            cfg.timeout,
            runtime.check_health,
            lambda: f"{runtime.alive()}/{cfg.num_actors} actors alive",
            in_actor_order=cfg.num_actors if cfg.deterministic else 0,
            replay=ring,
            replay_columns=cfg.replay_columns if ring else 0,
        )
        interval = _Interval(learner.frames)

        def log_row() -> None:
            row = interval.summary(learner.frames)
            row.update(
                time=time.time() - start,
                learner_steps=learner.steps,
                full_queue_occupancy=runtime.full_occupancy(),
                env_failures=runtime.env_failures(),
                actor_restarts=runtime.restarts,
                episodes=stats.episodes,
                mean_return_100=stats.mean_return(),
            )
            row.update(runtime.metrics())
            row.update(stats.level_metrics())
            if evaluation is not None:
                evaluation.collect(logger)
                row.update(evaluation.row())
            logger.metrics(learner.frames, row)
            interval.reset(learner.frames)

        last_log = last_ckpt = time.monotonic()
        while learner.frames < cfg.total_frames and not stats.reached(target):
            staged = staging.next()
            weights = staged.replay.weights.to(device) if ring is not None and ring.prioritized and staged.replay is not None else None
            for k in range(cfg.updates_per_batch):
                metrics = learner.step(staged.data, staged.fresh, weights, count=k == 0)
                if learner.bad_updates_in_a_row >= cfg.max_bad_updates:
                    raise NonFiniteError(
                        f"{learner.bad_updates_in_a_row} updates in a row had a non-finite loss or gradient (skipped); "
                        f"the last good state is checkpointed in {checkpoint.folder(logdir)}. Check the rewards and observations, or lower --learning-rate"
                    )
                interval.add(metrics, staged.wait_s if k == 0 else 0.0, staged.stage_s if k == 0 else 0.0)
            if ring is not None and ring.prioritized:
                staging.report_priorities(staged.number, unroll_priorities(learner.abs_advantages, cfg.replay_priority_eta))
            runtime.weights.publish(agent, learner.steps, flat=learner.flat)  # weights back to the actors
            done = finished_episodes(staged.data, learner.frames, cfg.level_names, time.time(), staged.fresh)
            logger.episodes(done)
            stats.add(done)
            now = time.monotonic()
            if now - last_log >= cfg.log_interval:
                runtime.check_health()  # staging only checks while it waits; a dead actor must not go unnoticed
                log_row()
                last_log = now
            if now - last_ckpt >= cfg.checkpoint_secs or (evaluation is not None and evaluation.due(learner.frames)):
                saved_path = save()
                last_ckpt = now
                if evaluation is not None and evaluation.due(learner.frames):
                    evaluation.submit(saved_path, learner.frames)  # evaluate's code reads a checkpoint
        solved = stats.reached(target)
        if evaluation is not None:
            evaluation.finish(logger, save, learner.frames, cfg.timeout)
        if interval.steps or evaluation is not None:
            log_row()  # the last partial interval (and evaluations still in flight), so the files end where training ended
    except KeyboardInterrupt:
        interrupted = True
        log.warning("interrupted: saving a checkpoint and stopping the actors")
    finally:
        if staging is not None:
            staging.close()
        if evaluation is not None:
            evaluation.close()
        try:
            if learner.steps and (saved is None or learner.steps > int(saved["learner"]["steps"])):
                saved_path = save()  # before reaping the actors: a signal's grace period is short
            elif resumed_from:
                saved_path = resumed_from
        except checkpoint.CheckpointError as exc:
            final_error = exc  # raised below, unless another error is already on its way out
            log.error("%s", exc)
        finally:
            runtime.close()
            # After Ctrl-C or SIGTERM, exit promptly: the curve is one `pronghorn plot` away.
            curve = "not drawn (interrupted): run `pronghorn plot " + logdir + "`" if interrupted else write_curve(logdir)
            logger.close()  # after the curve: the W&B sink uploads it
    if final_error is not None:
        raise final_error
    return TrainResult(
        logdir,
        learner.frames,
        learner.steps,
        stats.episodes,
        stats.mean_return(),
        time.time() - start,
        saved_path,
        solved,
        interrupted,
        resumed_from,
        curve,
    )
