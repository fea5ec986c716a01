"""What standardising observations costs the learner: in cache-sized chunks (pronghorn's way on CPU) or one
operation over the whole batch at a time.

  .venv/bin/python benchmarks/obs_norm.py                    # Pong's stacks, the image defaults' and the best batch
  .venv/bin/python benchmarks/obs_norm.py --rows 168 --reps 30

On one thread, malloc tuned as in the learner process, for each batch size: the statistics' update over rows
0..T-1, and the forward pass the learner's torso reads (standardised, then channels last), in milliseconds of
process CPU time per call (median of --rounds rounds, the two ways alternated), and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pronghorn import obs_norm
from pronghorn.obs_norm import ObservationNorm
from pronghorn.runtime.tuning import tune_malloc

WHOLE_BATCH = 1 << 62  # chunk bytes: every batch is one chunk


def cpu_ms(fn, reps: int) -> float:
    fn()
    start = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - start) / reps * 1e3


def time_both_ways(rows: int, reps: int, rounds: int) -> dict[tuple[str, str], float]:
    """Median ms per call of the update and the learner's forward pass, for each way, on `rows` stacks."""
    g = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 256, (rows, 4, 84, 84), dtype=torch.uint8, generator=g)
    norm = ObservationNorm((4, 84, 84))
    fresh = obs[: rows - rows // 21]  # rows 0..T-1 of each column, as the learner counts them
    norm.update(fresh)

    def forward() -> torch.Tensor:
        # The learner's pass: the torso then converts to channels last (a no-op where it already is).
        return norm(obs, channels_last=True).contiguous(memory_format=torch.channels_last)

    chunked = obs_norm._CHUNK_BYTES
    times: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(rounds):
            for way, size in (("whole batch", WHOLE_BATCH), ("chunks", chunked)):
                obs_norm._CHUNK_BYTES = size
                times.setdefault((way, "update"), []).append(cpu_ms(lambda: norm.update(fresh), reps))
                times.setdefault((way, "forward"), []).append(cpu_ms(forward, reps))
    finally:
        obs_norm._CHUNK_BYTES = chunked
    return {key: statistics.median(values) for key, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="*", default=[168, 672], help="(T+1) x B stacks: 21 x 8 the defaults, 21 x 32 the best")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tune_malloc()
    torch.set_num_threads(1)
    print(f"one thread; Pong's [4, 84, 84] uint8 stacks; chunks of {obs_norm._CHUNK_BYTES >> 20} MB of floats; ms per call, median of {args.rounds} rounds")
    for rows in args.rows:
        times = time_both_ways(rows, args.reps, args.rounds)
        for part in ("update", "forward"):
            whole, chunks = times[("whole batch", part)], times[("chunks", part)]
            print(f"{rows:4d} rows  {part:8s} whole batch {whole:7.2f}  chunks {chunks:7.2f}  ({whole / chunks:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
