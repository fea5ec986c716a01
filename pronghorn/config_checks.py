"""Validation of a Config: every check runs on construction, so a bad value fails before any process starts,
with one line that names the flag and says how to fix it (the CLI prints it and exits 2)."""

from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING, Literal, TypeVar

if TYPE_CHECKING:
    from pronghorn.config import Config

_T = TypeVar("_T")

# The discrete classic-control ids envpool steps in C++ (its Pendulum and MountainCarContinuous are continuous).
ENVPOOL_CLASSIC_CONTROL = frozenset({"CartPole-v0", "CartPole-v1", "Acrobot-v1", "MountainCar-v0"})
# Ids whose Gymnasium vector env pronghorn can reset in the same step (envs/vector.py).
VECTOR_LEVELS = frozenset({"CartPole-v0", "CartPole-v1"})


class ConfigError(Exception):
    """A configuration value is invalid; the message names the field and the fix."""


def need(ok: bool, message: str) -> None:
    """Raise a ConfigError with `message` unless `ok` (the message names the flag and the fix)."""
    if not ok:
        raise ConfigError(message)


def resolved(value: _T | None, name: str) -> _T:
    """A field that Config.for_observations fills in (None until then): its value, or a clear error."""
    if value is None:
        raise ValueError(f"Config.{name} is unresolved: call Config.for_observations first")
    return value


_CHOICES: dict[type, dict[str, tuple[object, ...]]] = {}


def choices(config_type: type) -> dict[str, tuple[object, ...]]:
    """Each field typed `Literal[...]` (or `Literal[...] | None`) and the values it allows."""
    if config_type in _CHOICES:  # resolving the hints costs more than the rest of check(); every Config pays it once
        return _CHOICES[config_type]
    hints = typing.get_type_hints(config_type)
    allowed = {}
    for field in dataclasses.fields(config_type):
        hint = hints[field.name]
        literals = [hint] if typing.get_origin(hint) is Literal else [a for a in typing.get_args(hint) if typing.get_origin(a) is Literal]
        if literals:
            allowed[field.name] = tuple(v for lit in literals for v in typing.get_args(lit)) + ((None,) if type(None) in typing.get_args(hint) else ())
    _CHOICES[config_type] = allowed
    return allowed


def check(cfg: Config) -> None:
    """Every check of a whole config (Config.__post_init__ runs it)."""
    # The CLI refuses a value outside a Literal's choices; a Config built in Python (or from a saved run's JSON)
    # does not pass through it, and a misspelt choice would otherwise act as some other branch's default.
    for name, allowed in choices(type(cfg)).items():
        value = getattr(cfg, name)
        need(value in allowed, f"--{name.replace('_', '-')} is {value!r}: choose one of {', '.join(str(v) for v in allowed if v is not None)}")
    need(bool(cfg.env.strip()), "--env is empty: give a Gymnasium id such as CartPole-v1 or ALE/Pong-v5")
    if cfg.levels is not None:
        check_levels(cfg)
    for name in ("num_actors", "envs_per_actor", "unroll_length", "batch_size", "total_frames", "hidden_size", "updates_per_batch"):
        value = getattr(cfg, name)
        need(value is None or value >= 1, f"--{name.replace('_', '-')} is {value}: it must be at least 1")
    need(
        cfg.lr_decay_frames is None or cfg.lr_decay_frames >= 0,
        f"--lr-decay-frames is {cfg.lr_decay_frames}: give a frame count, or 0 for a constant rate",
    )
    need(cfg.learning_rate is None or cfg.learning_rate > 0, f"--learning-rate is {cfg.learning_rate}: it must be positive")
    need(0 <= cfg.discount <= 1, f"--discount is {cfg.discount}: it must lie in [0, 1]")
    need(0 < cfg.rmsprop_alpha < 1, f"--rmsprop-alpha is {cfg.rmsprop_alpha}: it must lie in (0, 1)")
    need(cfg.rmsprop_eps is None or cfg.rmsprop_eps > 0, f"--rmsprop-eps is {cfg.rmsprop_eps}: it must be positive")
    need(cfg.rmsprop_init >= 0, f"--rmsprop-init is {cfg.rmsprop_init}: it must be 0 or more (0 is PyTorch's start, 1 TF1's)")
    need(cfg.rmsprop_init == 0 or cfg.optimizer == "rmsprop", "--rmsprop-init sets RMSProp's state: drop it with --optimizer adam")
    need(cfg.rmsprop_momentum >= 0, f"--rmsprop-momentum is {cfg.rmsprop_momentum}: it must be 0 or more")
    need(cfg.ppo_clip is None or 0 < cfg.ppo_clip < 1, f"--ppo-clip is {cfg.ppo_clip}: it must lie in (0, 1), e.g. 0.1 or 0.2 (or unset for IMPALA's term)")
    need(
        cfg.ppo_clip is None or cfg.updates_per_batch > 1,
        "--ppo-clip clips the passes after a batch's first, and there is one: add --updates-per-batch 2 or more, or drop --ppo-clip",
    )
    need(0 <= cfg.vtrace_lambda <= 1, f"--vtrace-lambda is {cfg.vtrace_lambda}: it must lie in [0, 1]")
    need(cfg.grad_norm_clip > 0, f"--grad-norm-clip is {cfg.grad_norm_clip}: it must be positive")
    need(cfg.baseline_cost >= 0, f"--baseline-cost is {cfg.baseline_cost}: it must be 0 or more")
    need(cfg.entropy_cost >= 0, f"--entropy-cost is {cfg.entropy_cost}: it must be 0 or more")
    need(0 <= cfg.sticky_actions <= 1, f"--sticky-actions is {cfg.sticky_actions}: it is a probability in [0, 1]")
    need(cfg.noop_max >= 0, f"--noop-max is {cfg.noop_max}: it must be 0 or more")
    need(cfg.learner_threads >= 0, f"--learner-threads is {cfg.learner_threads}: use 0 for automatic or a positive count")
    need(
        cfg.actor_nice is None or 0 <= cfg.actor_nice <= 19,
        f"--actor-nice is {cfg.actor_nice}: use a niceness from 0 (the learner's priority) to 19 (the lowest)",
    )
    need(cfg.log_interval > 0, f"--log-interval is {cfg.log_interval}: it must be positive (seconds)")
    need(cfg.checkpoint_secs > 0, f"--checkpoint-secs is {cfg.checkpoint_secs}: it must be positive (seconds)")
    need(cfg.max_bad_updates >= 1, f"--max-bad-updates is {cfg.max_bad_updates}: it must be at least 1")
    need(cfg.max_actor_restarts >= 0, f"--max-actor-restarts is {cfg.max_actor_restarts}: use 0 (never restart) or more")
    need(cfg.max_env_failures >= 1, f"--max-env-failures is {cfg.max_env_failures}: it must be at least 1")
    need(cfg.keep_checkpoints >= 1, f"--keep-checkpoints is {cfg.keep_checkpoints}: keep at least 1")
    need(cfg.eval_every >= 0, f"--eval-every is {cfg.eval_every}: give a frame count, or 0 for no evaluation")
    need(cfg.eval_episodes >= 1, f"--eval-episodes is {cfg.eval_episodes}: it must be at least 1")
    need(cfg.eval_every > 0 or not cfg.eval_video, "--eval-video records the evaluations of --eval-every: set --eval-every too")
    if cfg.runtime == "ray":
        import importlib.util

        try:
            found = importlib.util.find_spec("ray") is not None  # not imported here: runtime/ray_runtime.py sets Ray's environment first
        except ValueError:  # sys.modules["ray"] is None: blocked
            found = False
        need(found, "--runtime ray needs Ray: pip install 'pronghorn[ray]' (or pip install ray)")
        need(not cfg.deterministic, "--deterministic is not supported with --runtime ray (its lock-step needs shared memory): drop one of them")
    if cfg.inference == "central":
        need(cfg.runtime == "local", "--inference central runs with --runtime local in this version: use --inference actor with --runtime ray")
        need(not cfg.deterministic, "--deterministic needs --inference actor (its lock-step loads exact weight versions in each actor): drop one of them")
    need(cfg.inference_max_wait_ms >= 0, f"--inference-max-wait-ms is {cfg.inference_max_wait_ms}: it must be 0 or more")
    need(cfg.inference_max_batch is None or cfg.inference_max_batch >= 1, f"--inference-max-batch is {cfg.inference_max_batch}: it must be at least 1")
    need(cfg.runtime == "ray" or cfg.ray_address is None, "--ray-address is for --runtime ray: add --runtime ray or drop --ray-address")
    if cfg.wandb:
        try:
            import wandb  # noqa: F401  (only whether it imports)
        except ImportError:
            raise ConfigError("--wandb needs the wandb package: pip install 'pronghorn[wandb]' (or pip install wandb)") from None
    need(cfg.timeout > 0, f"--timeout is {cfg.timeout}: it must be positive (seconds)")
    for name in ("learning_rate", "discount", "rmsprop_eps", "rmsprop_init", "grad_norm_clip", "entropy_cost", "baseline_cost", "log_interval"):
        value = getattr(cfg, name)
        need(
            value is None or (value == value and value not in (float("inf"), float("-inf"))),
            f"--{name.replace('_', '-')} is {value}: it must be a finite number",
        )
    need(
        not (cfg.deterministic and cfg.updates_per_batch > 1),
        "--deterministic's lock-step expects one update per batch: drop --updates-per-batch or --deterministic",
    )
    if cfg.envs_per_actor is not None:  # otherwise for_observations fills it in and these run then
        check_batch(cfg)
        check_replay(cfg)
    need(0 < cfg.popart_step < 1, f"--popart-step is {cfg.popart_step}: it must lie in (0, 1)")
    if cfg.env_backend == "envpool":
        for level in cfg.level_names:
            need(
                level.startswith("ALE/") or level in ENVPOOL_CLASSIC_CONTROL,
                f"--env-backend envpool serves Atari ids (ALE/<Game>-v5) and {', '.join(sorted(ENVPOOL_CLASSIC_CONTROL))}, not {level}: use --env-backend gymnasium",
            )
        check_one_pool_per_actor(cfg)
    if cfg.env_backend == "vector":
        atari = all(level.startswith("ALE/") for level in cfg.level_names)
        need(
            atari or (len(cfg.level_names) == 1 and cfg.level_names[0] in VECTOR_LEVELS),
            f"--env-backend vector steps Gymnasium's vector {' or '.join(sorted(VECTOR_LEVELS))} and Atari ids (ale-py's vector env), not {','.join(cfg.level_names)}: use --env-backend auto",
        )
        if atari:
            from pronghorn.envs import ale_vector

            need(
                ale_vector.available(),
                "--env-backend vector for Atari needs ale-py's vector env (ale_py.vector_env; tested with ale-py 0.12.1): upgrade ale-py or use --env-backend gymnasium",
            )
            check_one_pool_per_actor(cfg)
    if cfg.device == "cuda":
        import torch

        need(torch.cuda.is_available(), "--device cuda but PyTorch sees no CUDA device: use --device cpu or install a CUDA build of torch")


def check_one_pool_per_actor(cfg: Config) -> None:
    """envpool and ale-py's vector env step one level per actor, and give a game only its legal actions."""
    flag = f"--env-backend {cfg.env_backend}"
    need(
        len(cfg.level_names) == 1 or "ALE/Skiing-v5" not in cfg.level_names,
        f"{flag} cannot give ALE/Skiing-v5 the 18 actions the other levels share (its legal set has 9): use --env-backend gymnasium",
    )
    need(
        cfg.num_actors >= len(cfg.level_names),
        f"{flag} steps one level per actor, but {len(cfg.level_names)} levels need at least that many actors: "
        f"use --num-actors {len(cfg.level_names)} or --env-backend gymnasium",
    )


def check_batch(cfg: Config) -> None:
    """Checks of the batch against --envs-per-actor (run once for_observations has filled both in)."""

    envs_per_actor = cfg.envs
    if cfg.batch_size is not None and cfg.batch_size % envs_per_actor:
        fit = envs_per_actor * max(1, round(cfg.batch_size / envs_per_actor))
        raise ConfigError(
            f"--batch-size {cfg.batch_size} is not a multiple of --envs-per-actor {envs_per_actor}: "
            f"a batch is made of whole actor unrolls, so use e.g. --batch-size {fit}"
        )
    if cfg.num_buffers is not None and cfg.batch_size is not None:
        need(
            cfg.num_buffers >= cfg.batch_slots + cfg.num_actors,
            f"--num-buffers {cfg.num_buffers} is too small: a batch of {cfg.batch_size} unrolls takes "
            f"{cfg.batch_slots} slots and each of the {cfg.num_actors} actors fills one more, so the actors could never fill a batch; "
            f"use at least {cfg.batch_slots + cfg.num_actors} or leave it unset",
        )
    if cfg.deterministic and cfg.batch_size is not None and cfg.batch_slots % cfg.num_actors:
        raise ConfigError(
            f"--deterministic takes the same number of unrolls from each actor, but a batch of {cfg.batch_size} is "
            f"{cfg.batch_slots} actor unrolls of {envs_per_actor} envs, not a multiple of --num-actors {cfg.num_actors}: "
            f"use e.g. --batch-size {envs_per_actor * cfg.num_actors * max(1, round(cfg.batch_slots / cfg.num_actors))}"
        )


def check_replay(cfg: Config) -> None:
    """Checks of the replay flags, and of the batch's fresh/replayed split once the batch is known."""
    need(0 <= cfg.replay_fraction < 1, f"--replay-fraction is {cfg.replay_fraction}: it must lie in [0, 1) (some of every batch must be fresh)")
    need(cfg.replay_capacity >= 1, f"--replay-capacity is {cfg.replay_capacity}: it must be at least 1 unroll")
    need(cfg.replay_priority_exponent >= 0, f"--replay-priority-exponent is {cfg.replay_priority_exponent}: it must be 0 or more")
    need(0 <= cfg.replay_priority_eta <= 1, f"--replay-priority-eta is {cfg.replay_priority_eta}: it must lie in [0, 1]")
    need(0 <= cfg.replay_is_exponent <= 1, f"--replay-is-exponent is {cfg.replay_is_exponent}: it must lie in [0, 1]")
    need(cfg.replay_kl_limit is None or cfg.replay_kl_limit > 0, f"--replay-kl-limit is {cfg.replay_kl_limit}: it must be positive (or unset)")
    need(cfg.replay_max_gb > 0, f"--replay-max-gb is {cfg.replay_max_gb}: it must be positive")
    if not cfg.replay_fraction or cfg.batch_size is None:
        return
    envs_per_actor = cfg.envs
    replayed = cfg.replay_columns
    need(
        replayed >= 1,
        f"--replay-fraction {cfg.replay_fraction} of a batch of {cfg.batch_size} replays no unroll: raise it to at least {0.5 / cfg.batch_size:.3g} or use 0",
    )
    fresh = cfg.batch_size - replayed
    if fresh % envs_per_actor:
        whole = [k * envs_per_actor for k in range(1, cfg.batch_slots)]
        options = ", ".join(f"{(cfg.batch_size - f) / cfg.batch_size:g}" for f in whole) or "none at this batch size"
        raise ConfigError(
            f"--replay-fraction {cfg.replay_fraction} leaves {fresh} fresh unrolls per batch of {cfg.batch_size}, not whole actor unrolls of "
            f"--envs-per-actor {envs_per_actor}: use one of {options}, or change --batch-size"
        )
    need(
        cfg.replay_capacity >= cfg.batch_size,
        f"--replay-capacity {cfg.replay_capacity} is smaller than a batch ({cfg.batch_size} unrolls): the ring fills from whole batches, so use at least {cfg.batch_size}",
    )
    if cfg.deterministic:
        need(
            (fresh // envs_per_actor) % cfg.num_actors == 0,
            f"--deterministic takes the same number of unrolls from each actor, but {fresh // envs_per_actor} fresh actor unrolls per batch "
            f"do not divide among --num-actors {cfg.num_actors}: change --replay-fraction or --batch-size",
        )
        need(not cfg.checkpoint_replay, "--deterministic with --checkpoint-replay is not supported: drop one of them")


def check_levels(cfg: Config) -> None:
    """Checks of --levels: a known suite or distinct ids, and enough environments to play them all."""
    from pronghorn import suites

    levels = resolved(cfg.levels, "levels")
    name = levels.strip().lower()
    if name in suites.UNAVAILABLE:
        raise ConfigError(f"--levels {cfg.levels}: {suites.UNAVAILABLE[name]}")
    names = cfg.level_names
    if not names:
        raise ConfigError("--levels is empty: give comma-separated ids (ALE/Pong-v5,ALE/Breakout-v5) or a suite: " + ", ".join(suites.SUITES))
    repeated = sorted({lv for lv in names if names.count(lv) > 1})
    if repeated:
        raise ConfigError(f"--levels names {', '.join(repeated)} more than once: list each level once")
    envs = cfg.num_actors * (cfg.envs_per_actor or 8)  # unset: the smaller of its defaults, checked again once filled in
    if envs < len(names):
        raise ConfigError(
            f"--levels has {len(names)} levels but {cfg.num_actors} actors x {cfg.envs_per_actor or 8} envs = {envs} environments "
            f"could not play them all: raise --num-actors or --envs-per-actor so their product is at least {len(names)}"
        )
