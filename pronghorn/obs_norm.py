"""Observations standardised per element by running statistics (--normalize-observations).

Each input element (a pixel of a stacked frame, a coordinate of a state vector) is shifted by its running
mean and divided by its running standard deviation, then clipped to [-CLIP, CLIP]. On Atari most of the
screen is background that never changes: standardised, it reads 0, and only what moves (ball, paddles,
score) reaches the first layer, where raw pixels in [0, 1] feed every filter the same large constant.

mean, var and count are non-trainable Parameters, as PopArt's statistics are: they sit in the learner's
flat weight tensor, so actors and the inference server act with the statistics of the weights they
hold, and every checkpoint saves them. Their gradient stays zero, so no optimizer step moves them; the
learner moves them with `update`, from fresh (not replayed) observations only.
"""

from __future__ import annotations

import torch
from torch import nn

CLIP = 5.0
# Added to the variance: an element that never changed (var 0) reads 0 instead of dividing by zero.
EPS = 1e-8


class ObservationNorm(nn.Module):
    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(obs_shape), requires_grad=False)
        self.var = nn.Parameter(torch.ones(obs_shape), requires_grad=False)
        # Observations seen so far (float: it lives in the flat float weight tensor). Each update weighs the
        # batch by its share of everything seen, so the statistics settle as training goes on.
        self.count = nn.Parameter(torch.zeros(1), requires_grad=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [..., *obs_shape] (uint8 pixels or floats) -> float, standardised and clipped."""
        # In place on one fresh float copy (copy=True: float inputs are the caller's tensor): Pong's learner
        # batch is 11 MB of floats, and each out-of-place op would allocate and fault in another 11 MB.
        x = obs.to(torch.float32, copy=True)
        return x.sub_(self.mean).mul_(torch.rsqrt(self.var + EPS)).clamp_(-CLIP, CLIP)

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        """Fold a batch obs [N, *obs_shape] into the statistics (Chan et al.'s pairwise combination)."""
        x = obs.reshape(-1, self.mean.numel()).to(torch.float32, copy=True)
        n = x.shape[0]
        if n == 0:
            return
        # Two passes, in place: torch.var_mean over the rows took 19 ms on Pong's 80 x 28,224 batch, this 0.7.
        batch_mean = x.mean(dim=0)
        batch_var = x.sub_(batch_mean).square_().mean(dim=0)
        batch_mean, batch_var = batch_mean.view_as(self.mean), batch_var.view_as(self.mean)
        seen = self.count  # [1]: tensor arithmetic, so a GPU learner does not wait on a read-back here
        total = seen + n
        delta = batch_mean - self.mean
        # Sum of squared deviations of both parts, plus what the gap between their means adds.
        m2 = self.var * seen + batch_var * n + delta.square() * (seen * n / total)
        self.mean.add_(delta * (n / total))
        self.var.copy_(m2 / total)
        self.count.copy_(total)
