"""The one typed, frozen run configuration.

Every field carries a docstring; tyro turns them into `pronghorn train --help`. Validation happens on
construction (`__post_init__` runs `config_checks.check`) so a bad value fails before any process starts, with a message that says
what is wrong and how to fix it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import tyro

# Re-exported: the rest of the package imports these from pronghorn.config.
from pronghorn.config_checks import ENVPOOL_CLASSIC_CONTROL as ENVPOOL_CLASSIC_CONTROL
from pronghorn.config_checks import VECTOR_LEVELS as VECTOR_LEVELS
from pronghorn.config_checks import ConfigError as ConfigError
from pronghorn.config_checks import check
from pronghorn.config_checks import need as need
from pronghorn.config_checks import resolved as resolved
from pronghorn.defaults import observation_defaults

_SUFFIX = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000, "b": 1_000_000_000}


def parse_count(text: str) -> int:
    """Parse a frame count such as `500000`, `500k`, `10M`, `1.5M` or `2e6` into an int."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgb]?)\s*", str(text), re.IGNORECASE)
    if not match:
        raise ConfigError(f"cannot read {text!r} as a frame count: write digits with an optional k or M, e.g. 500k or 10M")
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value != int(value):
        raise ConfigError(f"frame count {text!r} is not a whole number of frames")
    return int(value)


def frame_count_flag(flag: str) -> Any:
    """An int field read from the command line as a frame count (500k, 10M); a bad value names `flag`."""

    def parse(text: str) -> int:
        try:
            return parse_count(text)
        except ConfigError as exc:
            raise ConfigError(f"{flag}: {exc}") from None

    return Annotated[
        int,
        tyro.constructors.PrimitiveConstructorSpec(
            nargs=1,
            metavar="FRAMES",
            instance_from_str=lambda args: parse(args[0]),
            is_instance=lambda x: isinstance(x, int),
            str_from_instance=lambda x: [str(x)],
        ),
    ]


# What a run saved before a flag existed did, where that differs from the flag's default now: resuming it
# with the new default would build another agent than the one in its checkpoint.
BEFORE_IT_EXISTED = {"normalize_observations": "off"}

# Flags a resumed run may change: budgets, logging, where the learner runs. Everything else shapes the
# agent, the data or the objective, and must match the checkpoint.
RESUMABLE_CHANGES = frozenset(
    {
        "total_frames",
        "logdir",
        "log_interval",
        "checkpoint_secs",
        "keep_checkpoints",
        "progress",
        "timeout",
        "device",
        "learner_threads",
        "learner_precision",
        "compile_learner",
        "stop_at_return",
        "restart",
        "num_buffers",
        "actor_nice",
        "pin_actors",
        "max_bad_updates",
        "max_env_failures",
        "max_actor_restarts",
        "checkpoint_replay",
        "replay_max_gb",
        "eval_every",
        "eval_episodes",
        "runtime",
        "ray_address",
        "inference",
        "inference_max_batch",
        "inference_max_wait_ms",
        "wandb",
        "wandb_project",
        "wandb_entity",
        "wandb_group",
        "eval_video",
    }
)


@dataclasses.dataclass(frozen=True)
class Config:
    """Train an IMPALA agent: actors step environments, a V-trace learner trains on their unrolls."""

    # --- environment ---------------------------------------------------------------------------
    env: str = "CartPole-v1"
    """Gymnasium environment id (e.g. CartPole-v1, ALE/Pong-v5, MinAtar/Breakout-v0). Every actor plays this level unless --levels is given."""
    levels: str | None = None
    """Train one agent on many levels: comma-separated ids (ALE/Pong-v5,ALE/Breakout-v5) or a suite: atari57, atari5, minatar. Replaces --env. Actor i plays levels[i % L]; with fewer actors than levels, each actor's environments take turns over the levels."""
    env_backend: Literal["auto", "gymnasium", "envpool", "vector"] = "auto"
    """How environments are stepped: `gymnasium` (any id, one Python env object each; Atari through ale-py), `envpool` (C++ batches without a per-env Python loop: Atari ids and the classic-control CartPole-v0/v1, Acrobot-v1, MountainCar-v0), `vector` (the env's own Gymnasium vector env: numpy-vectorised CartPole-v0/v1 in the actor's thread, or ale-py's C++ batch of Atari games, the same emulator and preprocessing as `gymnasium`), or `auto`: vector for CartPole and for Atari (an actor's environments all on one game), envpool for Acrobot and MountainCar when envpool is installed, gymnasium for everything else."""
    max_actor_restarts: int = 10
    """Stop training if one actor process dies more than this many times within a minute (a crash loop); below that each dead actor is replaced."""
    max_env_failures: int = 5
    """Stop training when one environment raises this many times in a row (each failure is logged, the env recreated)."""
    sticky_actions: float = 0.25
    """Atari: probability that the previous action is repeated at each emulator frame (0.25 as in ALE v5)."""
    episodic_life: bool = True
    """Atari: a lost life ends the training episode (the game goes on; statistics count the whole game)."""
    noop_max: int = 30
    """Atari: at most this many no-op actions at the start of each game."""

    # --- agent ---------------------------------------------------------------------------------
    model: Literal["auto", "mlp", "small", "shallow", "nature", "deep"] = "auto"
    """Network torso: `mlp` for vector observations, `small` (one conv layer) for small grids such as MinAtar, `shallow` or `deep` (IMPALA CNNs) for images; `auto` picks by observation."""
    lstm: bool = False
    """Add an LSTM core fed with the torso features, the previous action and the clipped reward."""
    hidden_size: int = 64
    """Width of the MLP layers (images use IMPALA's 256-unit layer)."""
    init: Literal["orthogonal", "torch"] = "orthogonal"
    """Weight initialisation: `orthogonal` (gain sqrt 2 in the torso, 0.01 for the policy head, 1 for the baseline, zero biases) or `torch` (PyTorch's layer defaults)."""

    # --- actors, buffers, batches --------------------------------------------------------------
    num_actors: int = 2
    """Actor processes. For an env whose step costs microseconds, fewer actors with more envs each are faster: on 2 cores CartPole with 1 actor of 512 envs (--batch-size 512) trained about twice as fast as with 2 actors of 128."""
    envs_per_actor: int | None = None
    """Environments each actor steps together as one batch; default 16 for vector observations (cheap envs such as CartPole: more envs per step amortise the actor's per-step inference; 8 with --replay-fraction), 8 for images."""
    unroll_length: int | None = None
    """T: environment steps per unroll (each unroll carries T+1 observations); default 20 (IMPALA)."""
    batch_size: int | None = None
    """Unrolls (one per environment) per learner batch, a multiple of --envs-per-actor; default 16 for vectors, 32 (IMPALA's) for small grids such as MinAtar, 8 for the image CNNs (16 with replay, so that half of it can be replayed): with standardised observations 8 x 20 learned Pong in fewer frames than A2C's 16 x 5 (README, "Defaults by observation kind")."""
    num_buffers: int | None = None
    """Shared-memory unroll slots (each holds one actor's --envs-per-actor unrolls); default: enough for two batches plus two per actor."""
    actor_nice: int | None = None
    """Niceness added to the actor processes (0-19; 0 keeps the learner's priority). Default 10 with --inference actor: the actors wait on the learner, so where they share cores it should run first (measured on 2 cores: CartPole E=256 kept the cores 96-97 % busy instead of 90-94 %, Pong 6 % faster). Default 0 with central inference: there the learner process waits on every actor's step, and Pong with an LSTM ran ~10 % slower at 10."""
    pin_actors: Literal["auto", "on", "off"] = "auto"
    """Pin actor i's process to one core: the i-th of the cores this run may use, counting round (the learner stays free to use any). `auto`: on where an actor's environments step on a worker thread of their own (Atari on ale-py's vector env; envpool: Atari, Acrobot, MountainCar) and there are no more actors than cores: that thread and the actor's then hand each step to each other on one core (Pong on 2 cores: 1.12-1.15x the frames/s with the defaults, 1.00-1.11x in the other settings measured); off otherwise (CartPole's defaults ran 0.90-0.95x pinned). Linux only; local runtime only."""

    # --- learner -------------------------------------------------------------------------------
    total_frames: frame_count_flag("--total-frames") = 500_000  # type: ignore[valid-type]  # an Annotated type built per flag
    """Environment frames to train for (accepts 500k, 10M)."""
    learning_rate: float | None = None
    """Learning rate (see --lr-decay-frames for its schedule); default 7e-4 (A2C's Atari value) for the image CNNs, 6e-4 (IMPALA's) for small grids, 3e-3 for vector observations (the small MLP needs larger steps to learn within 500k frames)."""
    lr_decay_frames: frame_count_flag("--lr-decay-frames") | None = None  # type: ignore[valid-type]  # as above
    """Anneal the learning rate linearly to 0 over this many frames (and keep it at 0 after); 0 keeps it constant. Default for vector observations: 500k at batch 16 x unroll 20 (CartPole's tuned schedule) and as many updates at other shapes (500k x B x T / 320); constant for images and grids. It never follows --total-frames, so a 10M-frame run learns as the first 10M frames of a longer one."""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """`rmsprop` (IMPALA's) or `adam`."""
    adam_eps: float = 1e-5
    """Adam epsilon (with --optimizer adam)."""
    rmsprop_alpha: float = 0.99
    """RMSProp decay."""
    rmsprop_eps: float | None = None
    """RMSProp epsilon, added outside the square root as PyTorch does (TF1, the paper's framework, adds it inside); default 0.01 (IMPALA), but 1e-5 (A2C) for the image CNNs."""
    rmsprop_momentum: float = 0.0
    """RMSProp momentum."""
    rmsprop_init: float = 0.0
    """RMSProp: the value every running mean of squared gradients starts at. 0 is PyTorch's start: the first steps are then up to 10x the learning rate on every weight at once. 1 is TF1's (IMPALA's framework): steps start proportional to the gradient and reach RMSProp's size over a few hundred updates, a warm-up."""
    grad_norm_clip: float = 40.0
    """Clip the global gradient norm to this value."""
    discount: float = 0.99
    """Discount factor gamma."""
    vtrace_lambda: float = 1.0
    """V-trace's trace decay lambda (c_t = lambda * min(1, rho_t)); 1 is the paper's V-trace, lower trades bias for less variance."""
    baseline_cost: float = 0.5
    """Weight of the baseline loss 0.5 * sum (vs - V)^2."""
    entropy_cost: float = 0.01
    """Weight of the entropy regulariser."""
    reward_clipping: Literal["abs_one", "soft_asymmetric", "none"] = "abs_one"
    """Reward clipping applied in the learner (actors and statistics see raw rewards)."""
    normalize_observations: Literal["auto", "on", "off"] = "auto"
    """Standardise every observation element by its running mean and standard deviation (clipped to ±5) before the torso; the learner updates the statistics from fresh batches and they travel with the weights. `auto`: on for the shallow and nature CNNs on pixel images (Atari's constant background then reads 0 and the first convolution stays alive), off for the deep ResNet (its loss went non-finite on Pong with it), vectors and small grids."""
    popart: bool = False
    """PopArt: normalise the value targets per level with running statistics, preserving the agent's outputs when they change (van Hasselt et al. 2016; Hessel et al. 2019)."""
    popart_step: float = 3e-4
    """PopArt: step size of the running mean and second moment of each level's value targets."""
    updates_per_batch: int = 1
    """Learner updates on each batch (frames are counted once); more than 1 reuses every unroll, as PPO's epochs do (V-trace corrects the growing lag). The control for replay's effect: as many gradient samples per fresh frame, without replay."""
    ppo_clip: float | None = None
    """With --updates-per-batch above 1: the policy-gradient term of every pass becomes PPO's clipped surrogate on V-trace's advantages, its ratio taken to the policy of the batch's first pass and clipped to 1 +- this epsilon (0.1 in Sample Factory's Atari APPO, 0.2 in PPO's paper). The first pass is IMPALA's update exactly; later ones cannot move an action's probability further than the clip. `clip_fraction` in metrics.csv is the share of steps outside it. Unset: every pass is IMPALA's. On Pong, `--updates-per-batch 2 --ppo-clip 0.2` on unrolls of 40 or 80 steps at the defaults' 160 steps per update (`--unroll-length 40 --envs-per-actor 4 --batch-size 4`, or 80, 2, 2) learned in the fewest frames measured (docs/pong_beside_sample_factory.md; run to 1.87M frames only, so the image defaults stay)."""
    normalize_advantages: bool = False
    """Standardise the policy term's advantages over each batch (zero mean, unit standard deviation, after PopArt's per-level scale and before replay's weights), as PPO implementations and Sample Factory's APPO always do. Off by default: IMPALA's term, whose size follows the rewards' (with the flag, Pong's policy collapsed in every run measured, docs/pong_beside_sample_factory.md)."""
    max_bad_updates: int = 10
    """Stop training (with a checkpoint of the last good state) after this many updates in a row with a non-finite loss or gradient; each is skipped."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Learner device; `auto` takes CUDA when available. Actors always run on CPU."""
    learner_threads: int = 0
    """Torch threads in the learner; 0 picks the cores left over by the actors (at least 1), and at least 2 for `--model deep` on CPU, whose convolutions gain from a second thread even on a core an actor uses (Pong on 2 cores: 1.15-1.26x the frames/s)."""
    learner_precision: Literal["fp32", "bf16"] = "fp32"
    """The learner's forward and backward pass: `bf16` runs its convolutions and matrix products in bfloat16 under torch.autocast (weights, V-trace, losses and optimizer stay fp32); 1.4-2x faster updates for the image networks on a CPU with AVX512-BF16 (measured here; AMX and CUDA GPUs of compute capability 8.0+ have bf16 too), slower on CPUs without. Actors always act in fp32."""

    compile_learner: bool = False
    """Compile the learner's forward pass, V-trace and loss terms (and so their backward) with torch.compile, fusing their many small ops into a few kernels (on CPU called from generated C++). Pays for small networks, whose update is hundreds of tiny ops: measured here, CartPole's MLP update ran 1.2-1.8x faster and CartPole trained 1.0-1.3x faster, while the MinAtar CNN's update got 1.5x slower and Pong's shallow CNN trained within the noise of eager (docs/performance.md, "The learner compiled"). Compiling takes 5-30 s at the second update (torch caches it on disk for later runs) and needs a C++ compiler (g++) on CPU, Triton on CUDA. One update in a hundred runs uncompiled, for the dead-unit probe."""

    # --- replay ----------------------------------------------------------------------------------
    replay_fraction: float = 0.0
    """Share of every batch's unrolls drawn from a replay ring of recent unrolls (exactly round(batch x fraction) of them; the rest are fresh from the actors, and must be whole actor unrolls). 0 (the default) is plain IMPALA and allocates nothing; IMPALA's replay experiments used 0.5."""
    replay_capacity: int = 4096
    """Unrolls the replay ring holds; the oldest are overwritten. Its size in bytes is printed at start-up."""
    replay_sampling: Literal["uniform", "prioritized"] = "uniform"
    """How replayed unrolls are drawn: `uniform`, or `prioritized` by each unroll's mean absolute V-trace advantage (see --replay-priority-eta), with importance weights in the loss."""
    replay_priority_exponent: float = 0.6
    """Prioritized replay: an unroll is drawn with probability proportional to priority ** this (0 is uniform)."""
    replay_priority_eta: float = 0.0
    """Prioritized replay: priority = eta * max + (1 - eta) * mean of the unroll's absolute V-trace advantages (0: the mean; R2D2 used 0.9)."""
    replay_is_exponent: float = 0.6
    """Prioritized replay: importance weight (N * P(i)) ** -this, divided by the batch's largest; 0 turns the correction off."""
    replay_kl_limit: float | None = None
    """Trust region: a replayed unroll whose behaviour policy is further than this KL (mean over its steps) from the current policy gets no policy gradient; the masked share is logged as replay_masked_fraction."""
    replay_max_gb: float = 16.0
    """Refuse a replay ring larger than this many GiB (a ring that would not fit in available memory is refused too)."""
    checkpoint_replay: bool = False
    """Save the replay ring in every checkpoint (large: its size is printed) so a resumed run replays from where it stopped; without it a resumed run refills the ring."""

    # --- run -----------------------------------------------------------------------------------
    runtime: Literal["local", "ray"] = "local"
    """Where actors run: `local` (processes on this machine, shared memory) or `ray` (Ray actors on any node of a Ray cluster; needs `pip install 'pronghorn[ray]'`)."""
    ray_address: str | None = None
    """With --runtime ray: the cluster to join (`auto`, or HEAD:6379); default: a private Ray instance on this machine (loopback, no dashboard), shut down at the end."""
    inference: Literal["auto", "actor", "central"] = "auto"
    """Where the policy runs for acting: `actor` (each actor process has its own CPU copy), `central` (actors only step environments; an inference server in the learner process batches every actor's step on the learner's device and keeps LSTM state there), or `auto`: central when the learner has CUDA, actor otherwise (on CPU every model measured faster in the actors, the deep ResNet included; see README)."""
    inference_max_batch: int | None = None
    """--inference central: most environments answered in one batch; default every actor's, i.e. num_actors x envs_per_actor."""
    inference_max_wait_ms: float = 2.0
    """--inference central: after the first request of a batch arrives, wait at most this long for the other actors before answering."""
    deterministic: bool = False
    """Lock-step mode: every update takes the same number of unrolls from each actor, in actor order, made with the weights of exactly one update before; with deterministic torch settings two runs with the same seed give identical episodes and weights (slower)."""
    seed: int = 0
    """Seed: actor i uses seed+i, its environment j seed + i*envs_per_actor + j."""
    logdir: str | None = None
    """Where logs, config and checkpoints go; default runs/<env>-<timestamp>, a new directory each run (-2, -3, ... when runs start in the same second). A named logdir that holds a run is resumed."""
    stop_at_return: float | None = None
    """Stop early once the mean return of the last 100 episodes reaches this; default: the env's reward threshold (CartPole-v1: 475), none for Atari."""
    log_interval: float = 5.0
    """Seconds between console lines and metrics.csv rows."""
    checkpoint_secs: int = 600
    """Seconds between checkpoints (one is also written at the end and on Ctrl-C or SIGTERM)."""
    keep_checkpoints: int = 3
    """How many of the newest checkpoints to keep."""
    wandb: bool = False
    """Also log to Weights & Biases (needs `pip install 'pronghorn[wandb]'`): the scalars TensorBoard gets, the config, evaluation videos and the curve; the run is named after the logdir and a resumed logdir continues its W&B run. WANDB_MODE=offline keeps it on disk."""
    wandb_project: str = "pronghorn"
    """W&B project (with --wandb)."""
    wandb_entity: str | None = None
    """W&B entity, a user or team (with --wandb); default: your W&B default."""
    wandb_group: str | None = None
    """W&B group, e.g. one per sweep or per seed set (with --wandb)."""
    eval_every: frame_count_flag("--eval-every") = 0  # type: ignore[valid-type]  # an Annotated type built per flag
    """Every this many frames, checkpoint and play the greedy policy in a separate, low-priority process (`pronghorn evaluate`'s code); logged as eval/<level>/return and in eval.csv. 0 (the default): off."""
    eval_episodes: int = 10
    """Games per level in each evaluation of --eval-every."""
    eval_video: bool = False
    """With --eval-every: also record the first level's games as <logdir>/eval/video-<frames>.mp4 and a GIF in TensorBoard."""
    restart: bool = False
    """Start anew in a logdir that holds a run: its files are moved aside into <logdir>/previous-<time>/, never deleted. Without it, such a logdir is resumed."""
    progress: bool = True
    """Show a progress bar toward --total-frames."""
    timeout: float = 120.0
    """Seconds any blocking wait may last before training stops with an error naming what it waited for."""

    def __post_init__(self) -> None:
        check(self)

    def for_observations(self, obs_shape: tuple[int, ...]) -> Config:
        """This config with the defaults that depend on the observations filled in (`defaults.py`) and validated again."""
        return dataclasses.replace(self, **observation_defaults(self, obs_shape))

    def resume_conflicts(self, saved: dict[str, Any]) -> list[str]:
        """Flags that differ from the run being resumed and would change its agent, data or objective."""
        conflicts = []
        saved = {**BEFORE_IT_EXISTED, **saved}  # what a run older than a flag did without it
        for field in dataclasses.fields(self):
            if field.name in RESUMABLE_CHANGES or field.name not in saved:
                continue
            here, there = getattr(self, field.name), saved[field.name]
            if here != there:
                conflicts.append(f"--{field.name.replace('_', '-')} is {here!r} here but {there!r} in the run")
        return conflicts

    # --- derived values --------------------------------------------------------------------------
    @property
    def level_names(self) -> tuple[str, ...]:
        """Levels played, in order; Unroll.level indexes this tuple."""
        if self.levels is None:
            return (self.env,)
        from pronghorn import suites

        return suites.expand(self.levels)

    @property
    def run_name(self) -> str:
        """A short name for the run: the env, the suite, or the first level and how many more."""
        if self.levels is None:
            return self.env
        from pronghorn import suites

        names = self.level_names
        return suites.suite_name(self.levels) or (names[0] if len(names) == 1 else f"{names[0]}+{len(names) - 1}")

    @property
    def backend(self) -> Literal["gymnasium", "envpool", "vector"]:
        """The env backend actors use: --env-backend, with `auto` resolved (see backend_for)."""
        return self.backend_for(self.level_names)

    def backend_for(self, levels: Sequence[str]) -> Literal["gymnasium", "envpool", "vector"]:
        """The backend that steps these levels together (an actor's environments)."""
        if self.env_backend != "auto":
            return self.env_backend
        import importlib.util

        if len(set(levels)) != 1:
            return "gymnasium"  # only one Python env object per environment mixes levels in one actor
        level = levels[0]
        if level in VECTOR_LEVELS:
            return "vector"
        if level.startswith("ALE/"):
            from pronghorn.envs import ale_vector
            from pronghorn.envs.single import uses_full_action_set

            # Skiing's legal set (9) is not the full 18 actions a multi-game agent shares: its actor steps it through ale-py's AtariEnv.
            skiing = level == "ALE/Skiing-v5" and uses_full_action_set(self)
            return "vector" if ale_vector.available() and not skiing else "gymnasium"
        if level in ENVPOOL_CLASSIC_CONTROL and importlib.util.find_spec("envpool") is not None:
            return "envpool"
        return "gymnasium"

    @property
    def envs(self) -> int:
        """--envs-per-actor, resolved (for_observations fills in its default)."""
        return resolved(self.envs_per_actor, "envs_per_actor")

    @property
    def batch_slots(self) -> int:
        """Shared-memory slots (actor unrolls) per learner batch."""
        return resolved(self.batch_size, "batch_size") // self.envs

    @property
    def replay_columns(self) -> int:
        """Replayed unrolls per batch, once the ring holds a batch (0 without replay)."""
        return round(resolved(self.batch_size, "batch_size") * self.replay_fraction)

    @property
    def fresh_slots(self) -> int:
        """Actor unrolls (slots) per batch once replay is running; every batch before that is all fresh."""
        return (resolved(self.batch_size, "batch_size") - self.replay_columns) // self.envs

    @property
    def buffer_slots(self) -> int:
        return self.num_buffers if self.num_buffers is not None else 2 * self.batch_slots + 2 * self.num_actors

    def resolved_logdir(self, stamp: str) -> str:
        if self.logdir:
            return self.logdir
        return os.path.join("runs", f"{self.run_name.replace('/', '_')}-{stamp}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)
