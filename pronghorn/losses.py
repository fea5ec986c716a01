"""IMPALA's loss terms, summed (not averaged) over time and batch as in the paper.

Shapes: logits [T, B, A], actions/advantages/targets/values [T, B].
"""

from __future__ import annotations

import torch

from pronghorn.softmax import action_log_probs, log_softmax


def clip_rewards(rewards: torch.Tensor, mode: str) -> torch.Tensor:
    """`abs_one`: clamp to [-1, 1]; `soft_asymmetric`: 5*tanh(r/5), negatives scaled by 0.3; `none`."""
    if mode == "abs_one":
        return torch.clamp(rewards, -1.0, 1.0)
    if mode == "soft_asymmetric":
        squeezed = torch.tanh(rewards / 5.0)
        return torch.where(rewards < 0, 0.3 * squeezed, squeezed) * 5.0
    if mode == "none":
        return rewards
    raise ValueError(f"unknown reward clipping mode {mode!r}: use abs_one, soft_asymmetric or none")


def policy_gradient_loss(logits: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """-sum log pi(a_t|x_t) * A_t; the advantages are constants."""
    return -(action_log_probs(logits, actions) * advantages.detach()).sum()


def clipped_policy_loss(log_rhos: torch.Tensor, advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's clipped surrogate, summed: -sum min(rho_t A_t, clip(rho_t, 1 - clip, 1 + clip) A_t).

    log_rhos [T, B]: log pi(a_t|x_t) minus the log-probability under the policy the ratio is taken to (PPO's
    "old" policy), the gradient flowing through pi; advantages [T, B] are constants. At rho = 1 its gradient
    is the plain policy gradient's; once rho has left [1 - clip, 1 + clip] in the advantage's direction the
    step gets none, so passes that reuse a batch cannot push one action's probability far from the old one."""
    rhos = log_rhos.exp()
    a_t = advantages.detach()
    return -torch.minimum(rhos * a_t, rhos.clamp(1.0 - clip, 1.0 + clip) * a_t).sum()


def standardized(advantages: torch.Tensor) -> torch.Tensor:
    """(A_t - mean A) / std A over every step of the batch [T, B], as PPO implementations and Sample Factory
    do to theirs. The policy term's size then no longer follows the rewards', so the entropy term's weight
    beside it is the same in every env and stage (with IMPALA's RMSProp that collapsed Pong's policy:
    docs/pong_beside_sample_factory.md). The statistics take in every column, replayed or masked ones too.
    Advantages that are all equal come out 0 (the std's floor only guards the division)."""
    std, mean = torch.std_mean(advantages.detach(), correction=0)  # correction 0: one step gives std 0, not NaN
    return (advantages - mean) / std.clamp_min(1e-7)


def baseline_loss(targets: torch.Tensor, values: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """0.5 * sum w (v_s - V(x_s))^2; the learner weighs it with --baseline-cost (0.5 in IMPALA).

    weights: optional per-column [B] (replay's importance weights), broadcast over time."""
    squared = (targets.detach() - values) ** 2
    if weights is not None:
        squared = squared * weights
    return 0.5 * squared.sum()


def behaviour_kl(behaviour_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """KL(mu || pi) per step [T, B] from logits [T, B, A]: how far the policy moved since it acted."""
    log_mu = log_softmax(behaviour_logits)
    log_pi = log_softmax(target_logits.detach())
    return (log_mu.exp() * (log_mu - log_pi)).sum(-1)


def entropy_loss(logits: torch.Tensor) -> torch.Tensor:
    """sum pi log pi (the negative entropy): minimising it keeps the policy from collapsing early."""
    log_pi = log_softmax(logits)
    return (log_pi.exp() * log_pi).sum()
