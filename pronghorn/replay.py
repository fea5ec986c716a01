"""Replay: a ring of recent unrolls, sampled uniformly or by priority, owned by the staging thread.

A column is one environment's unroll: every field of an Unroll with its environment dim (dim 1) cut to
one entry. The ring stores columns in preallocated host tensors shaped like a batch with `capacity`
columns; `add` copies columns in and `gather` copies them out, so no batch ever shares memory with the
ring (a batch that aliased ring memory would change under the learner when the ring is overwritten).

Priorities (prioritized sampling, Schaul et al. 2016) come back from the learner one batch late: the
staging thread has already inserted and sampled the next batch by then. Every insertion gets a serial
number (`stamp`), and a priority update is applied only where the column it was computed for is still
there, so an update for an overwritten column cannot land on its successor.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import psutil
import torch

from pronghorn.config import Config, ConfigError, resolved
from pronghorn.records import Unroll, unroll_spec, zeros_unroll


class ReplaySample(NamedTuple):
    """Where a batch's columns live in the ring, for priority updates; and the replayed ones' weights."""

    positions: torch.Tensor  # [B] int64 ring position of every batch column (fresh ones: where they were stored)
    stamps: torch.Tensor  # [B] int64 insertion serial numbers of those columns
    weights: torch.Tensor  # [B] float32 importance weights (1 for fresh columns and for uniform sampling)


def column_bytes(example: Unroll) -> int:
    """Bytes one column (one environment's unroll) takes, from a batch-shaped example [.., B, ..]."""
    return sum(t[:, :1].numel() * t.element_size() for t in example)


def unroll_priorities(abs_advantages: torch.Tensor, eta: float) -> torch.Tensor:
    """Per-unroll priority from absolute advantages [T, B] -> [B]: eta * max + (1 - eta) * mean over time (R2D2's mix)."""
    return eta * abs_advantages.amax(0) + (1.0 - eta) * abs_advantages.mean(0)


class ReplayRing:
    """`capacity` columns; the oldest are overwritten. Not thread-safe: one owner (the staging thread)."""

    def __init__(
        self,
        example: Unroll,
        capacity: int,
        sampling: str = "uniform",
        priority_exponent: float = 0.6,
        is_exponent: float = 0.6,
        seed: int = 0,
    ):
        if sampling not in ("uniform", "prioritized"):
            raise ValueError(f"unknown replay sampling {sampling!r}: use uniform or prioritized")

        def ring_of(t: torch.Tensor) -> torch.Tensor:
            shape = list(t.shape)
            shape[1] = capacity
            return torch.zeros(shape, dtype=t.dtype)  # zeros, not empty: the pages are touched now, not mid-run

        self.data = Unroll(*(ring_of(t) for t in example))
        self.capacity = capacity
        self.prioritized = sampling == "prioritized"
        self.alpha, self.beta = priority_exponent, is_exponent
        self.priority = torch.zeros(capacity, dtype=torch.float64)
        self.stamp = torch.full((capacity,), -1, dtype=torch.int64)
        self.size = 0  # columns held
        self.inserted = 0  # columns ever inserted; the next one's stamp, and (mod capacity) its position
        self.max_priority = 1.0  # new columns get the largest priority seen, so each is sampled soon
        self.generator = torch.Generator().manual_seed(seed)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.data) + self.priority.numel() * 16

    def add(self, batch: Unroll, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy columns [start, start+count) of `batch` into the ring; returns their (positions, stamps)."""
        stamps = torch.arange(self.inserted, self.inserted + count, dtype=torch.int64)
        positions = stamps % self.capacity
        for src, dst in zip(batch, self.data):
            dst.index_copy_(1, positions, src[:, start : start + count])
        self.stamp[positions] = stamps
        self.priority[positions] = self.max_priority
        self.inserted += count
        self.size = min(self.capacity, self.size + count)
        return positions, stamps

    def probabilities(self) -> torch.Tensor:
        """P(i) for the columns held [size]."""
        if not self.prioritized:
            return torch.full((self.size,), 1.0 / self.size, dtype=torch.float64)
        scaled = self.priority[: self.size] ** self.alpha
        return scaled / scaled.sum()

    def sample(self, count: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draw `count` columns with replacement; returns (positions, stamps, importance weights)."""
        if self.size == 0:
            raise RuntimeError("the replay ring is empty")
        if not self.prioritized:
            positions = torch.randint(self.size, (count,), generator=self.generator)
            return positions, self.stamp[positions].clone(), torch.ones(count)
        probs = self.probabilities()
        positions = torch.multinomial(probs, count, replacement=True, generator=self.generator)
        # Prioritized draws are biased toward large errors; (N * P(i))^-beta undoes it (beta = 1: fully),
        # divided by the largest weight in the draw so weights only ever shrink a step.
        weights = (self.size * probs[positions]) ** -self.beta
        return positions, self.stamp[positions].clone(), (weights / weights.max()).float()

    def gather(self, positions: torch.Tensor, out: Unroll, start: int) -> None:
        """Copy the columns at `positions` into columns [start, start+len) of `out` (a batch buffer)."""
        end = start + len(positions)
        for src, dst in zip(self.data, out):
            dst[:, start:end] = src.index_select(1, positions)

    def update_priorities(self, positions: torch.Tensor, stamps: torch.Tensor, priorities: torch.Tensor) -> int:
        """Set priorities where the column is still the one they were computed for; returns how many were set."""
        current = self.stamp[positions] == stamps
        pos, pri = positions[current], priorities[current].double().clamp_min(1e-6)
        self.priority[pos] = pri
        if len(pri):
            self.max_priority = max(self.max_priority, float(pri.max()))
        return int(current.sum())

    def state_dict(self) -> dict[str, Any]:
        return {
            "data": Unroll(*(t.clone() for t in self.data))._asdict(),
            "priority": self.priority.clone(),
            "stamp": self.stamp.clone(),
            "size": self.size,
            "inserted": self.inserted,
            "max_priority": self.max_priority,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        data = Unroll(**state["data"])
        for name, saved, here in zip(Unroll._fields, data, self.data):
            if saved.shape != here.shape:
                raise ValueError(f"replay field {name} is {tuple(saved.shape)} in the checkpoint but {tuple(here.shape)} here")
            here.copy_(saved)
        self.priority.copy_(state["priority"])
        self.stamp.copy_(state["stamp"])
        self.size, self.inserted, self.max_priority = int(state["size"]), int(state["inserted"]), float(state["max_priority"])
        self.generator.set_state(state["generator"])


def build_ring(cfg: Config, obs_shape: tuple[int, ...], obs_dtype: np.dtype, num_actions: int, core_size: int) -> ReplayRing | None:
    """The run's ring (None without replay), after checking that it fits: exit 2 with the numbers if not."""
    if not cfg.replay_fraction:
        return None
    layout = unroll_spec(resolved(cfg.unroll_length, "unroll_length"), 1, obs_shape, obs_dtype, num_actions, core_size)
    one = zeros_unroll(layout)
    need = column_bytes(one) * cfg.replay_capacity
    available = psutil.virtual_memory().available
    gib = need / 2**30
    if gib > cfg.replay_max_gb:
        raise ConfigError(
            f"--replay-capacity {cfg.replay_capacity:,} unrolls of {column_bytes(one):,} bytes need {gib:.2f} GiB, over --replay-max-gb {cfg.replay_max_gb:g}: "
            f"lower --replay-capacity to {int(cfg.replay_max_gb * 2**30 // column_bytes(one)):,} or raise --replay-max-gb"
        )
    if need > 0.8 * available:
        raise ConfigError(
            f"--replay-capacity {cfg.replay_capacity:,} unrolls need {gib:.2f} GiB but only {available / 2**30:.2f} GiB of memory is available: "
            f"lower --replay-capacity to {int(0.8 * available // column_bytes(one)):,} or less"
        )
    return ReplayRing(one, cfg.replay_capacity, cfg.replay_sampling, cfg.replay_priority_exponent, cfg.replay_is_exponent, seed=cfg.seed)
