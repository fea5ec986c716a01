"""The defaults that depend on what the environment shows: filled into a `Config` once the first
observation's shape is known (`Config.for_observations`).

Three kinds, by the torso that reads the observations (`resolve_torso`):
  vectors (mlp)                16 envs per actor (cheap steps), IMPALA's unroll and epsilon, a larger rate
                               decayed over 500k frames: CartPole
  small grids (small)          IMPALA's Atari settings (batch 32 x T=20, 6e-4), constant rate, 32 envs per
                               actor: MinAtar
  images (shallow/nature/deep) one actor's 8 unrolls of T=20 per update (~15.6K updates per 10M frames) and
                               A2C's RMSProp settings, constant rate
A flag the user gave always wins; only fields left at None (or `auto`) are filled in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pronghorn.config import Config

# Vector observations: the batch and unroll CartPole's learning-rate schedule was tuned at, and its length.
_MLP_BATCH, _MLP_UNROLL, _MLP_DECAY_FRAMES = 16, 20, 500_000
# Envs per actor with --replay-fraction, whatever the observations (see observation_defaults).
_REPLAY_ENVS = 8


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_torso(model: str, obs_shape: tuple[int, ...]) -> str:
    """The torso `--model` names; `auto`: small grids (3-d, under 36 pixels a side) get the small CNN, images the
    shallow CNN, vectors the MLP."""
    if model != "auto":
        return model
    if len(obs_shape) == 3:
        return "small" if max(obs_shape[1:]) < 36 else "shallow"
    return "mlp"


def _by_torso(cfg: Config, torso: str) -> dict[str, Any]:
    """The batch shape and optimiser settings each kind of observation starts from."""
    if torso == "mlp":
        # 16 envs per actor amortise the per-step inference of cheap envs. The rate's decay is filled in by
        # `observation_defaults`, from the batch shape.
        return dict(envs_per_actor=16, batch_size=_MLP_BATCH, unroll_length=_MLP_UNROLL, learning_rate=3e-3, rmsprop_eps=0.01)
    if torso == "small":
        # IMPALA's batch of 32 unrolls, all from one actor's 32 envs: MinAtar Breakout trains ~1.4x faster than
        # with 4 unrolls of 8 envs and learned as well (docs/performance.md, "Cheap environments").
        return dict(envs_per_actor=32, batch_size=32, unroll_length=20, learning_rate=6e-4, rmsprop_eps=0.01, lr_decay_frames=0)
    # Pong, Nature CNN, standardised observations, at 2.41M frames: +17.20 with 8 x 20 where 16 x 5 had
    # -1.14 (seed 2; README, "Defaults by observation kind"). 16 with replay: half replayed, half fresh.
    return dict(envs_per_actor=8, batch_size=16 if cfg.replay_fraction else 8, unroll_length=20, learning_rate=7e-4, rmsprop_eps=1e-5, lr_decay_frames=0)


def observation_defaults(cfg: Config, obs_shape: tuple[int, ...]) -> dict[str, Any]:
    """The values to fill into `cfg` for observations of this shape (fields the user set are kept)."""
    torso = resolve_torso(cfg.model, obs_shape)
    defaults = _by_torso(cfg, torso)
    if cfg.replay_fraction:
        # A batch is whole actor unrolls, fresh or replayed: with 8 envs per actor every default batch (16, 32)
        # can be half replayed and still take whole fresh unrolls.
        defaults["envs_per_actor"] = _REPLAY_ENVS
    envs_per_actor = cfg.envs_per_actor or defaults["envs_per_actor"]
    if cfg.batch_size is None and defaults["batch_size"] % envs_per_actor:
        # keep whole actor unrolls
        defaults["batch_size"] = envs_per_actor * max(1, round(defaults["batch_size"] / envs_per_actor))
    slots = defaults["batch_size"] // envs_per_actor
    if cfg.batch_size is None and cfg.deterministic and slots % cfg.num_actors:
        # lock-step takes as many unrolls from each actor: a whole number of unrolls per actor per batch
        defaults["batch_size"] = envs_per_actor * cfg.num_actors * max(1, round(slots / cfg.num_actors))
    filled = {name: value if getattr(cfg, name) is None else getattr(cfg, name) for name, value in defaults.items()}
    if torso == "mlp" and cfg.lr_decay_frames is None:
        # CartPole's schedule is tuned as 1,562 updates of 16 x 20: a larger batch decays over as many
        # updates, not as many frames (over 500k frames, 128 x 20 reached rate 0 after 195 updates and stayed near 200).
        filled["lr_decay_frames"] = _MLP_DECAY_FRAMES * filled["batch_size"] * filled["unroll_length"] // (_MLP_BATCH * _MLP_UNROLL)
    if cfg.inference == "auto":
        # Central inference pays a cross-process round trip per step (~0.1 ms here) to batch the model on
        # the learner's device: worth it with an accelerator there. On CPU every model measured faster with
        # the actors' own copies: the MLP 2.6-3.7x, MinAtar's CNN 1.4-2.1x, the shallow CNN with an LSTM
        # 1.15-1.24x (alternated runs; single pairs swing by 25 %), the deep ResNet 1.02x, 1.09x and 1.07x
        # in three throughput tables (it was central by default until the last two).
        central = cfg.device == "cuda" or (cfg.device == "auto" and _cuda_available())
        filled["inference"] = "central" if central and cfg.runtime == "local" and not cfg.deterministic else "actor"
    if cfg.normalize_observations == "auto":
        # Pong, Nature CNN, envpool, to 2.41M frames: -20.10 raw (the first convolution dead within the first
        # updates), +1.62, +17.20 and -1.14 standardised (none of it dead); see README, "Observation
        # statistics". Not the deep ResNet: its unnormalised residual sums of inputs up to 5 (not 1) made
        # the loss non-finite within its first updates on Pong.
        filled["normalize_observations"] = "on" if torso in ("shallow", "nature") else "off"
    if cfg.actor_nice is None:
        # Actor inference: actors only feed the learner, which should win the cores. Central: the server in
        # the learner process answers each actor's step, so a slowed actor slows the server's batches too.
        filled["actor_nice"] = 0 if filled.get("inference", cfg.inference) == "central" else 10
    return filled
