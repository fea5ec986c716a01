"""V-trace off-policy targets (Espeholt et al. 2018, IMPALA, section 4).

Pure functions over time-major tensors: leading dims `[T, B]`, any trailing dims allowed after them.
Targets are computed without gradient: the learner regresses on them, it does not differentiate them.

Definitions (paper, eq. 1, with per-step discounts so episode ends inside an unroll are respected):
  rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),   c_t = lambda * min(1, pi/mu)
  delta_t = rho_t * (r_t + discount_t * V(x_{t+1}) - V(x_t))
  v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} discount_i * c_i) * delta_t
  pg_advantage_s = min(rho_bar_pg, pi/mu)_s * (r_s + discount_s * v_{s+1} - V(x_s))
Here r_t and discount_t belong to the transition x_t -> x_{t+1} (discount_t = 0 when that step ended
the episode), and V(x_T) is the bootstrap value.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from pronghorn.softmax import action_log_probs  # log pi(a_t | x_t) for logits [T, B, A] and actions [T, B]


class VTraceReturns(NamedTuple):
    vs: torch.Tensor  # [T, B] value targets
    pg_advantages: torch.Tensor  # [T, B] advantages for the policy gradient


class VTraceFromLogitsReturns(NamedTuple):
    vs: torch.Tensor
    pg_advantages: torch.Tensor
    log_rhos: torch.Tensor  # [T, B] log(pi(a_t) / mu(a_t))
    behaviour_action_log_probs: torch.Tensor
    target_action_log_probs: torch.Tensor


@torch.no_grad()
def from_importance_weights(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace targets from log importance weights.

    Args:
      log_rhos: [T, B] log(pi(a_t|x_t) / mu(a_t|x_t)).
      discounts: [T, B] discount of the step x_t -> x_{t+1} (0 where it ended the episode).
      rewards: [T, B] reward of that step.
      values: [T, B] V(x_t) under the target policy.
      bootstrap_value: [B] V(x_T).
      clip_rho_threshold: rho_bar; None means no clipping.
      clip_pg_rho_threshold: clip for the policy-gradient weights; None means no clipping.
      lambda_: trace decay (the paper's remark on c_i = lambda * min(1, rho_i)); 1 is plain V-trace. On
        policy, the targets become TD(lambda) returns: lower lambda, less variance, more bias.
    """
    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else torch.clamp(rhos, max=clip_rho_threshold)
    cs = lambda_ * torch.clamp(rhos, max=1.0)
    # V(x_{t+1}) for every t: shift by one and bootstrap the last step from V(x_T).
    values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)

    # Backward recursion: (v_s - V(x_s)) = delta_s + discount_s * c_s * (v_{s+1} - V(x_{s+1})).
    # One op per step over views taken once: indexing, multiplying and writing back each step made the
    # loop ~8 ops per step, a fixed cost of every update that small batches feel (B=16: ~10 % of it).
    decay, delta = (discounts * cs).unbind(0), deltas.unbind(0)
    acc = torch.zeros_like(bootstrap_value)
    steps = [acc] * values.shape[0]
    for t in range(values.shape[0] - 1, -1, -1):
        acc = torch.addcmul(delta[t], decay[t], acc)
        steps[t] = acc
    vs = torch.stack(steps) + values

    # The policy gradient uses v_{s+1} (bootstrap at the end), not V(x_{s+1}).
    vs_tp1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_rhos = rhos if clip_pg_rho_threshold is None else torch.clamp(rhos, max=clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (rewards + discounts * vs_tp1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def from_logits(
    behaviour_policy_logits: torch.Tensor,
    target_policy_logits: torch.Tensor,
    actions: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> VTraceFromLogitsReturns:
    """V-trace from behaviour (mu) and target (pi) logits [T, B, A] and the actions taken [T, B]."""
    target_log_probs = action_log_probs(target_policy_logits, actions)
    behaviour_log_probs = action_log_probs(behaviour_policy_logits, actions)
    log_rhos = target_log_probs - behaviour_log_probs
    returns = from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value, clip_rho_threshold, clip_pg_rho_threshold, lambda_)
    return VTraceFromLogitsReturns(
        vs=returns.vs,
        pg_advantages=returns.pg_advantages,
        log_rhos=log_rhos,
        behaviour_action_log_probs=behaviour_log_probs,
        target_action_log_probs=target_log_probs,
    )
