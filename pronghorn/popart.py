"""PopArt: per-level normalised value targets with outputs preserved (van Hasselt et al. 2016; Hessel et al. 2019).

The baseline head predicts a normalised value n_l(s) for each level l; the agent's value is
V_l(s) = sigma_l * n_l(s) + mu_l, where mu_l and nu_l are running first and second moments of level l's
V-trace targets, and sigma_l = sqrt(nu_l - mu_l^2). When the statistics move, the head's weights are
rescaled so that V_l(s) is unchanged for every s ("preserving outputs precisely").

mu and nu are non-trainable Parameters of the head, so they travel to the actors with the weights (the
actors need unnormalised values to bootstrap truncations) and are saved in every checkpoint.
"""

from __future__ import annotations

import torch
from torch import nn

# sigma is kept in [SIGMA_MIN, SIGMA_MAX]: a level whose targets are all equal must not divide by zero.
SIGMA_MIN, SIGMA_MAX = 1e-4, 1e6


class PopArtHead(nn.Module):
    """Linear layer to one normalised value per level, with the levels' target statistics."""

    def __init__(self, features: int, num_levels: int):
        super().__init__()
        self.linear = nn.Linear(features, num_levels)
        self.mu = nn.Parameter(torch.zeros(num_levels), requires_grad=False)
        self.nu = nn.Parameter(torch.ones(num_levels), requires_grad=False)  # sigma starts at 1

    def sigma(self) -> torch.Tensor:
        return (self.nu - self.mu**2).clamp(SIGMA_MIN**2, SIGMA_MAX**2).sqrt()

    def forward(self, x: torch.Tensor, level: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [N, features], level: [N] int64 -> (unnormalised value [N], normalised value [N])."""
        normalized = self.linear(x).gather(1, level.view(-1, 1)).squeeze(1)
        return self.sigma()[level] * normalized + self.mu[level], normalized

    @torch.no_grad()
    def update(self, targets: torch.Tensor, level: torch.Tensor, step: float) -> None:
        """Move each level's statistics toward the batch's targets, then rescale the head to preserve outputs.

        targets: [T, B] value targets (V-trace vs); level: [B] the level of each batch column.
        A level absent from the batch keeps its statistics.
        """
        old_mu, old_sigma = self.mu.clone(), self.sigma()
        per_column_mean = targets.mean(dim=0)  # [B]
        per_column_sq = (targets**2).mean(dim=0)
        for lv in level.unique().tolist():
            cols = level == lv
            self.mu[lv] = (1 - step) * self.mu[lv] + step * per_column_mean[cols].mean()
            self.nu[lv] = (1 - step) * self.nu[lv] + step * per_column_sq[cols].mean()
        new_sigma = self.sigma()
        # sigma' n' + mu' = sigma n + mu for every input: n' = (sigma n + mu - mu') / sigma', i.e.
        # W' = W sigma / sigma' and b' = (sigma b + mu - mu') / sigma', row by row.
        self.linear.weight.mul_((old_sigma / new_sigma).unsqueeze(1))
        self.linear.bias.copy_((old_sigma * self.linear.bias + old_mu - self.mu) / new_sigma)

    def normalize(self, values: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
        """Unnormalised values [T, B] of batch columns at `level` [B] -> normalised ones."""
        return (values - self.mu[level]) / self.sigma()[level]
