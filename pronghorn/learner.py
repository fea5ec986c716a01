"""The learner: one V-trace update per batch, with RMSProp, linear LR decay and gradient clipping."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from pronghorn import vtrace
from pronghorn.config import Config, resolved
from pronghorn.diagnostics import DeadUnits
from pronghorn.flat import flatten_parameters, optimizer_state_to_flat, optimizer_step
from pronghorn.losses import baseline_loss, behaviour_kl, clip_rewards, clipped_policy_loss, entropy_loss, policy_gradient_loss, standardized
from pronghorn.models import Agent
from pronghorn.records import Unroll

_DEAD_UNITS_EVERY = 10  # updates between two readings of the dead-unit fractions
# Compiled, a reading costs an uncompiled update: 5.85 against 3.88 ms at CartPole's best batch, bf16 (an eager
# update with the probe's hooks, 5.05 against 4.54 ms). One in ten took 14 % of the compiled learner's time; one
# in a hundred takes under 2 %.
_DEAD_UNITS_EVERY_COMPILED = 100


class _Terms(NamedTuple):
    """What one update's forward pass and loss terms hand to the backward pass and the metrics."""

    total: torch.Tensor  # the loss to differentiate
    reported: tuple[torch.Tensor, ...]  # 0-d, detached: total, pg, baseline, entropy terms, the negative entropy, mean value, policy lag min/mean/max
    vs: torch.Tensor  # [T, B] V-trace value targets (PopArt's statistics follow them)
    abs_advantages: torch.Tensor  # [T, B] |policy-gradient advantages| (replay priorities)
    action_log_probs: torch.Tensor  # [T, B] log pi(a_t|x_t) under this pass's weights, detached (--ppo-clip's anchor)
    clip_fraction: torch.Tensor  # 0-d: share of steps whose ratio to the anchor is outside the clip (0 without --ppo-clip)
    replay_metrics: dict[str, float]


class Learner:
    """Owns the agent's trainable copy and its optimizer. The global step is environment frames."""

    def __init__(self, cfg: Config, agent: Agent, frames_per_step: int):
        self.cfg = cfg
        self.agent = agent
        self.frames_per_step = frames_per_step
        # PyTorch's RMSprop adds eps outside the square root: g / (sqrt(v) + eps); TF1 (the paper) used
        # g / sqrt(v + eps). With eps = 0.01 the two differ only where v is tiny; we keep PyTorch's form.
        self.base_lr = resolved(cfg.learning_rate, "learning_rate")
        self.lr_decay_frames = resolved(cfg.lr_decay_frames, "lr_decay_frames")
        # One flat tensor holds every weight (the agent's parameters are views of it), and one every gradient:
        # the optimizer, clipping and zeroing are then a few ops each instead of a loop over the parameters.
        self._shapes = [p.shape for p in agent.parameters()]
        self.flat = flatten_parameters(agent)
        if cfg.optimizer == "adam":
            self.optimizer: torch.optim.Optimizer = torch.optim.Adam([self.flat], lr=self.base_lr, eps=cfg.adam_eps)
        else:
            self.optimizer = torch.optim.RMSprop(
                [self.flat],
                lr=self.base_lr,
                alpha=cfg.rmsprop_alpha,
                eps=resolved(cfg.rmsprop_eps, "rmsprop_eps"),
                momentum=cfg.rmsprop_momentum,
            )
            if cfg.rmsprop_init:
                self._start_square_averages(cfg.rmsprop_init)
        self.bf16 = cfg.learner_precision == "bf16"
        self.frames = 0
        self.steps = 0  # updates done; also the version of the weights published after each update
        self.skipped_updates = 0  # non-finite loss or gradient: not applied
        self.bad_updates_in_a_row = 0
        # Dead units are read every few updates (a .item() per layer would sync a GPU every step); the
        # latest reading is reported with every step so interval averages stay meaningful.
        self.dead_units = DeadUnits(agent.torso)
        self.dead: dict[str, float] = {}
        self._probe_every = _DEAD_UNITS_EVERY_COMPILED if cfg.compile_learner else _DEAD_UNITS_EVERY
        self.abs_advantages = torch.zeros(0)  # [T, B] of the last step: replay priorities are made from it
        self._anchor: torch.Tensor | None = None  # [T, B] log pi(a_t|x_t) at the current batch's first pass
        # The update count as a 0-d tensor on the learner's device, refilled before each pass: the policy lag is then
        # reduced inside the (compiled) pass, where an int argument would recompile it at every new value.
        self._version = torch.zeros((), dtype=torch.int64, device=self.flat.device)
        self._behaviour: torch.Tensor | None = None  # [A, T+1, B]: the batch's behaviour logits, action-major
        # --compile-learner: the shapes never change within a run (dynamic=False), so the pass compiles once,
        # and once more with replay, whose batches are all fresh until the ring fills (a new `fresh`); with
        # replay it is two graphs around _replay_terms, which runs eagerly between them.
        # On CPU the kernels are called from generated C++ (cpp_wrapper), not from a generated Python function
        # that allocates or views each buffer (the MLP's forward pass: about 60 of them around 7 kernel calls):
        # at CartPole's best batch in bf16 an update took 5.16 against 5.68 ms. Not measured on CUDA: off there.
        on_cpu = self.flat.device.type == "cpu"
        options = {"cpp_wrapper": on_cpu, **getattr(agent.torso, "compile_options", {})}  # a torso's own (models.SmallTorso)
        self._compiled_losses = torch.compile(self._losses, dynamic=False, options=options) if cfg.compile_learner else self._losses

    def learning_rate(self) -> float:
        """Constant, or linear from --learning-rate to 0 over --lr-decay-frames (never tied to the budget)."""
        if not self.lr_decay_frames:  # 0: constant
            return self.base_lr
        return self.base_lr * max(0.0, 1.0 - self.frames / self.lr_decay_frames)

    def _losses(
        self,
        batch: Unroll,
        reward: torch.Tensor,
        done: torch.Tensor,
        fresh: int,
        weights: torch.Tensor | None,
        anchor: torch.Tensor | None,
        version: torch.Tensor,
    ) -> _Terms:
        """The forward pass, V-trace and the loss terms of one update (what --compile-learner compiles).

        reward: the batch's clipped rewards [T+1, B]; done: terminated or truncated [T+1, B]; anchor: [T, B]
        log pi(a_t|x_t) of the batch's first pass (--ppo-clip's later passes), None on the first; version: 0-d, the
        learner's update count (this update's weights)."""
        cfg = self.cfg
        # The batch's actions were chosen by the actors: this pass chooses none. --learner-precision bf16:
        # the products run in bfloat16 (autocast keeps fp32 weights); what comes out is fp32 again before
        # V-trace, whose importance ratios compare it with the actors' fp32 logits.
        with torch.autocast(self.flat.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            all_logits, all_values, _ = self.agent.logits_and_values(batch.obs, batch.last_action, reward, done, batch.core_state)
        all_logits, all_values = all_logits.float(), all_values.float()

        # Row T is seen only to bootstrap: its action is paid in the next unroll.
        bootstrap_value = all_values[-1]
        # Env data of row t+1 belongs to the transition taken at row t, so it is shifted by one here.
        rewards = reward[1:]
        # A time limit is not a terminal state: fold gamma * V(final obs) into the last reward.
        rewards = rewards + cfg.discount * batch.truncated[1:] * batch.truncation_value[1:]
        discounts = cfg.discount * (~done[1:]).float()
        logits, values, actions = all_logits[:-1], all_values[:-1], batch.action[:-1]

        vt = vtrace.from_logits(
            behaviour_policy_logits=batch.policy_logits[:-1],
            target_policy_logits=logits,
            actions=actions,
            discounts=discounts,
            rewards=rewards,
            values=values,
            bootstrap_value=bootstrap_value,
            lambda_=cfg.vtrace_lambda,
        )
        replay_metrics: dict[str, float] = {}
        pg_weights = weights
        if cfg.replay_fraction:
            replay_metrics, pg_weights = self._replay_terms(batch, logits, fresh, weights)
        popart, level = self.agent.popart, batch.level[0]
        advantages = vt.pg_advantages
        if popart is None:
            bl = cfg.baseline_cost * baseline_loss(vt.vs, values, weights)
        else:
            # PopArt: each level's advantages and value error are measured in units of its own target
            # scale, so a level with large returns does not drown the others' gradients.
            sigma = popart.sigma().detach()[level]  # [B]
            advantages = advantages / sigma
            bl = cfg.baseline_cost * baseline_loss(popart.normalize(vt.vs, level), popart.normalize(values, level), weights)
        if cfg.normalize_advantages:
            advantages = standardized(advantages)
        if pg_weights is not None:
            # After standardising: a column replay's trust region masked (weight 0) stays out of the term.
            advantages = advantages * pg_weights
        pg, clip_fraction = self._policy_loss(vt, anchor, logits, actions, advantages)
        neg_entropy = entropy_loss(logits)
        ent = cfg.entropy_cost * neg_entropy
        total = pg + bl + ent
        lag = (version - batch.policy_version[:, :fresh]).float()  # updates between acting and this update
        reported = tuple(x.detach() for x in (total, pg, bl, ent, neg_entropy, values.mean(), lag.min(), lag.mean(), lag.max()))
        log_pi = vt.target_action_log_probs.detach()
        return _Terms(total, reported, vt.vs.detach(), vt.pg_advantages.detach().abs(), log_pi, clip_fraction, replay_metrics)

    def _policy_loss(
        self, vt: vtrace.VTraceFromLogitsReturns, anchor: torch.Tensor | None, logits: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """IMPALA's policy-gradient term, or PPO's clipped surrogate with --ppo-clip, and the share of steps
        outside the clip (0-d; 0 without it). advantages [T, B]: V-trace's, scaled and weighed as the caller chose."""
        clip = self.cfg.ppo_clip
        if clip is None:
            return policy_gradient_loss(logits, actions, advantages), advantages.new_zeros(())
        # The ratio is to the batch's first pass, not to the actors' policy: the first pass (anchor None, the
        # ratio 1 with its gradient) is then IMPALA's update exactly, and V-trace's weights inside the
        # advantages alone correct the actors' lag, as they do without the clip.
        log_pi = vt.target_action_log_probs
        log_ratio = log_pi - (log_pi.detach() if anchor is None else anchor)
        outside = (log_ratio.detach().exp() - 1.0).abs().gt(clip).float().mean()
        return clipped_policy_loss(log_ratio, advantages, clip), outside

    def step(self, batch: Unroll, fresh: int = -1, weights: torch.Tensor | None = None, count: bool = True) -> dict[str, float]:
        """One update on a time-major batch [T+1, B, ...]; returns its metrics.

        fresh: columns [0, fresh) came from the actors, the rest from replay (-1: all fresh). Only fresh
        columns count as frames and policy lag. weights: [B] importance weights of prioritized replay.
        count: False for a second pass over the same batch (--updates-per-batch): its frames are counted once."""
        cfg = self.cfg
        fresh = batch.action.shape[1] if fresh < 0 else fresh
        done = batch.terminated | batch.truncated
        reward = clip_rewards(batch.reward, cfg.reward_clipping)
        if self.agent.obs_norm is not None and count:
            # Before the forward pass, so this update already sees statistics that include its batch. Row T
            # is row 0 of the actor's next unroll: left out, so no observation counts twice; replayed
            # columns were counted when they were fresh, and a second pass (count=False) adds nothing.
            self.agent.obs_norm.update(batch.obs[:-1, :fresh])
        self._version.fill_(self.steps)
        batch = batch._replace(policy_logits=self._action_major(batch.policy_logits))  # the slot itself is left as the actors wrote it
        probe = not self.dead or self.steps % self._probe_every == 0  # also the first update after a resume: same keys every step
        if probe:
            # The probe's forward hooks call .item(): this pass runs eagerly, uncompiled (compiled runs probe one
            # update in a hundred, eager ones one in ten).
            self.dead_units.arm()
            terms = self._losses(batch, reward, done, fresh, weights, None if count else self._anchor, self._version)
            self.dead = self.dead_units.read()
        else:
            terms = self._compiled_losses(batch, reward, done, fresh, weights, None if count else self._anchor, self._version)
        if count and self.cfg.ppo_clip is not None:
            self._anchor = terms.action_log_probs  # later passes over this batch (count=False) clip their ratio to it
        total, vs, popart, level = terms.total, terms.vs, self.agent.popart, batch.level[0]
        self.abs_advantages = terms.abs_advantages
        replay_metrics = terms.replay_metrics

        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        grad = self.flat.grad
        assert grad is not None  # flatten_parameters made it; the parameters' .grad are views of it
        grad.zero_()  # in place, not set to None: backward adds into those views
        total.backward()
        grad_norm_t = torch.linalg.vector_norm(grad)
        # Every scalar this step reports, read from the device in one transfer: the step's only host-device
        # sync (the finiteness check needs it before the optimizer step anyway).
        scalars = torch.stack([*terms.reported, grad_norm_t, terms.clip_fraction])
        total_f, pg_f, bl_f, ent_f, neg_entropy_f, value_mean, lag_min, lag_mean, lag_max, grad_norm, clip_fraction = scalars.float().cpu().tolist()
        # A non-finite loss or gradient would poison the weights (and RMSProp's statistics) for good:
        # skip the update. The batch still counts as consumed frames.
        finite = math.isfinite(total_f) and math.isfinite(grad_norm)
        if finite:
            # Global-norm clipping, on the one flat gradient: clip_grad_norm_'s scale, taken from the norm already
            # read above, so it is one op on the gradient, and none while the norm is under the clip.
            scale = cfg.grad_norm_clip / (grad_norm + 1e-6)
            if scale < 1.0:
                grad.mul_(scale)
            optimizer_step(self.optimizer, self.flat)
            self.bad_updates_in_a_row = 0
            if popart is not None:
                popart.update(vs, level, cfg.popart_step)  # after the step: the graph above used the old statistics
        else:
            grad.zero_()
            self.bad_updates_in_a_row += 1
            self.skipped_updates += 1

        t = batch.action.shape[0] - 1
        if count:
            self.frames += t * fresh * self.frames_per_step  # replayed columns were counted when they were fresh
        self.steps += int(finite)
        metrics = {
            "total_loss": total_f,
            "pg_loss": pg_f,
            "baseline_loss": bl_f,
            "entropy_loss": ent_f,
            "entropy": -neg_entropy_f / (t * batch.action.shape[1]),  # mean per-step policy entropy
            "grad_norm": grad_norm,
            "learning_rate": self.learning_rate(),
            "policy_lag_min": lag_min,
            "policy_lag_mean": lag_mean,
            "policy_lag_max": lag_max,
            "skipped_updates": float(self.skipped_updates),
            "value_mean": value_mean,
            **self.dead,
            **replay_metrics,
        }
        if cfg.ppo_clip is not None:
            metrics["clip_fraction"] = clip_fraction  # 0 on a batch's first pass; how far later passes got
        if popart is not None:
            for name, mu, sigma in zip(cfg.level_names, popart.mu.tolist(), popart.sigma().tolist()):
                metrics[f"popart_mu/{name}"], metrics[f"popart_sigma/{name}"] = mu, sigma
        return metrics

    def _action_major(self, logits: torch.Tensor) -> torch.Tensor:
        """The behaviour logits [T+1, B, A] as a view of an action-major copy [A, T+1, B] (on CPU; elsewhere as given).

        The slot holds them row-major, as the actors write them. V-trace takes their log-softmax and gather beside
        those of the learner's own logits, which are action-major on CPU (models.both_heads). Compiled, the two
        fuse into one loop, which a row-major operand kept scalar; eager, the log-softmax ran down strided
        columns. V-trace alone at CartPole's best batch (20 x 512, `benchmarks/learner_layouts.py --part vtrace`,
        alternated timings on one thread): compiled 369-371 against 104-135 us, eager 451-456 against 366-398;
        with six actions 670-674 against 180-190 and 587-662 against 441-511; level at 20 x 32. The copy costs
        8 us for two actions at that batch in numpy, where torch's transposing copy took 26-28."""
        if logits.device.type != "cpu":
            return logits  # not measured there
        rows, cols, a = logits.shape
        if self._behaviour is None or self._behaviour.shape != (a, rows, cols):
            self._behaviour = torch.empty(a, rows, cols, dtype=logits.dtype)
        self._behaviour.numpy()[...] = logits.numpy().transpose(2, 0, 1)
        return self._behaviour.permute(1, 2, 0)

    # Eager under --compile-learner: its .item() reads and the step count it ages unrolls by would make dynamo
    # recompile at every update (a graph guarded on each new value), until it gave up at its recompile limit.
    @torch.compiler.disable
    def _replay_terms(self, batch: Unroll, logits: torch.Tensor, fresh: int, weights: torch.Tensor | None) -> tuple[dict[str, float], torch.Tensor | None]:
        """Replay's metrics, and the policy-gradient weights [B] with the trust region applied.

        Same keys every step (metrics.csv fixes its columns on the first row): NaN where no column was replayed."""
        replayed = batch.action.shape[1] - fresh
        nan = float("nan")
        metrics = {"replay_columns": float(replayed), "replay_age_mean": nan, "replay_age_max": nan}
        if self.cfg.replay_kl_limit is not None:
            metrics["replay_masked_fraction"] = nan
        if not replayed:
            return metrics, weights
        # Age: updates since the replayed unroll's behaviour policy acted (its policy lag now).
        age = (self.steps - batch.policy_version[:, fresh:]).float()
        metrics["replay_age_mean"], metrics["replay_age_max"] = age.mean().item(), age.max().item()
        if self.cfg.replay_kl_limit is None:
            return metrics, weights
        # LASER's trust region: a replayed unroll whose behaviour policy drifted too far from the current
        # one gets no policy gradient (V-trace's clipped weights alone make such updates noisy); its value
        # targets are still learned from. Fresh columns are never masked.
        kl = behaviour_kl(batch.policy_logits[:-1, fresh:], logits[:, fresh:]).mean(0)  # [replayed]
        keep = torch.ones(batch.action.shape[1], device=logits.device)
        keep[fresh:] = (kl <= self.cfg.replay_kl_limit).float()
        metrics["replay_masked_fraction"] = 1.0 - keep[fresh:].mean().item()
        return metrics, keep if weights is None else weights * keep

    def _start_square_averages(self, value: float) -> None:
        """Fill RMSprop's state before its first step, as it would itself but with the running squares at
        `value` (it starts them at 0, and takes its state as given once there is any)."""
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                state = self.optimizer.state[p]
                state["step"] = torch.zeros((), dtype=torch.float32)
                state["square_avg"] = torch.full_like(p, value, memory_format=torch.preserve_format)
                if group["momentum"] > 0:
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)

    def state_dict(self) -> dict:
        return {"agent": self.agent.state_dict(), "optimizer": self.optimizer.state_dict(), "frames": self.frames, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.agent.load_state_dict(state["agent"])  # copies into the flat tensor's views
        self.optimizer.load_state_dict(optimizer_state_to_flat(state["optimizer"], self._shapes))
        self.frames, self.steps = int(state["frames"]), int(state["steps"])
