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

# On CPU a batch is standardised a few MB at a time, so a chunk's floats stay in cache from one operation to
# the next: over Pong's whole learner batch (672 stacks of [4, 84, 84], 76 MB as floats) every operation went
# to memory. `benchmarks/obs_norm.py` on that batch: the forward pass (channels last) 17.6 ms instead of 28.9,
# the statistics' update 9.1 instead of 28.3.
_CHUNK_BYTES = 4 << 20


def _rows_per_chunk(x: torch.Tensor, row_size: int) -> int:
    """Rows of `row_size` elements per chunk of x: about _CHUNK_BYTES of floats on CPU (at least one), all on a GPU."""
    row_size = max(1, row_size)
    if x.device.type != "cpu":
        return max(1, x.numel() // row_size)
    return max(1, _CHUNK_BYTES // (4 * row_size))


class ObservationNorm(nn.Module):
    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(obs_shape), requires_grad=False)
        self.var = nn.Parameter(torch.ones(obs_shape), requires_grad=False)
        # Observations seen so far (float: it lives in the flat float weight tensor). Each update weighs the
        # batch by its share of everything seen, so the statistics settle as training goes on.
        self.count = nn.Parameter(torch.zeros(1), requires_grad=False)

    def forward(self, obs: torch.Tensor, channels_last: bool = False) -> torch.Tensor:
        """obs [..., *obs_shape] (uint8 pixels or floats) -> float, standardised and clipped.

        channels_last: images come back in that memory layout (the one the CPU convolutions take), written
        chunk by chunk, instead of converted by the torso in one more pass over the whole batch."""
        scale = torch.rsqrt(self.var + EPS)
        row_size = self.mean.numel()
        step = _rows_per_chunk(obs, row_size)
        if (step * row_size >= obs.numel() and not channels_last) or torch.compiler.is_compiling():
            # Each operation over the whole batch: an actor's step fits in one chunk, a GPU would only see more
            # kernel launches in chunks, and a compiled graph fuses the four into one pass. In place on one
            # fresh float copy (copy=True: float inputs are the caller's tensor).
            return obs.to(torch.float32, copy=True).sub_(self.mean).mul_(scale).clamp_(-CLIP, CLIP)
        rows = obs.reshape(-1, *self.mean.shape)
        layout = torch.channels_last if channels_last and rows.dim() == 4 else torch.contiguous_format
        out = torch.empty(rows.shape, dtype=torch.float32, device=obs.device, memory_format=layout)
        # Channels last, each chunk is standardised in a small buffer in the input's layout, then copied
        # across: the same operations on a channels-last chunk were slower than that copy.
        buf = torch.empty((min(step, len(rows)), *self.mean.shape), device=obs.device) if layout is torch.channels_last else None
        for i in range(0, len(rows), step):
            dst = out[i : i + step]
            x = dst if buf is None else buf[: len(dst)]
            # Cast, then in place: a subtraction that casts as it goes (torch.sub(uint8, float)) was slower.
            x.copy_(rows[i : i + step]).sub_(self.mean).mul_(scale).clamp_(-CLIP, CLIP)
            if buf is not None:
                dst.copy_(x)
        return out.view(obs.shape)  # splits the rows again; a view keeps the layout

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        """Fold a batch obs [N, *obs_shape] into the statistics (Chan et al.'s pairwise combination)."""
        x = obs.reshape(-1, self.mean.numel())
        n = x.shape[0]
        if n == 0:
            return
        # Two passes, the mean and then the squared deviations from it (torch.var_mean over the rows took 19
        # ms on Pong's 80 x 28,224 batch, two whole-batch passes 0.7), in chunks on CPU, summed in float64.
        step = _rows_per_chunk(x, x.shape[1])
        sums = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
        for chunk in x.split(step):
            sums += chunk.sum(0, dtype=torch.float32)
        batch_mean = (sums / n).float()
        squares = torch.zeros_like(sums)
        for chunk in x.split(step):
            squares += chunk.to(torch.float32, copy=True).sub_(batch_mean).square_().sum(0)  # copy: never the caller's floats
        batch_mean, batch_var = batch_mean.view_as(self.mean), (squares / n).float().view_as(self.mean)
        seen = self.count  # [1]: tensor arithmetic, so a GPU learner does not wait on a read-back here
        total = seen + n
        delta = batch_mean - self.mean
        # Sum of squared deviations of both parts, plus what the gap between their means adds.
        m2 = self.var * seen + batch_var * n + delta.square() * (seen * n / total)
        self.mean.add_(delta * (n / total))
        self.var.copy_(m2 / total)
        self.count.copy_(total)
