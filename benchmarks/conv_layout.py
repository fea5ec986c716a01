"""NCHW against channels-last (NHWC) for each convolutional torso on this CPU, the conversion included.

For each torso and row count it times, in one process on one thread (median of --reps calls):
  forward    the torso in inference mode (an actor's step, the central inference server's batch)
  fwd+bwd    the torso with gradients, then backward from the sum of its features (the learner's pass)
once with the input as it arrives (NCHW, contiguous) and once converted to channels last first, as
models._conv_layout does. The rows: 8 and 16 are actors' steps, 168 the image defaults' learner batch
(8 unrolls x 21 rows), 672 the best Pong configuration's (32 x 21); MinAtar's small torso takes an im2col
kernel (NCHW only) up to 16 rows, so its NHWC cells there read nan.

  .venv/bin/python benchmarks/conv_layout.py
  .venv/bin/python benchmarks/conv_layout.py --torso deep --rows 8 --rows 168
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from unittest import mock

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pronghorn import models
from pronghorn.models import DeepTorso, NatureTorso, ShallowTorso, SmallTorso
from pronghorn.runtime.tuning import limit_threads, tune_malloc

TORSOS = {"shallow": (ShallowTorso, (4, 84, 84)), "nature": (NatureTorso, (4, 84, 84)), "deep": (DeepTorso, (4, 84, 84)), "small": (SmallTorso, (6, 10, 10))}


def median_ms(fn, reps: int) -> float:
    fn()  # warm-up: oneDNN builds its kernels for a shape on first use
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return 1e3 * times[len(times) // 2]


def forward(torso: torch.nn.Module, x: torch.Tensor, layout: torch.memory_format) -> None:
    with torch.inference_mode():
        torso(x.contiguous(memory_format=layout))


def both(torso: torch.nn.Module, x: torch.Tensor, layout: torch.memory_format) -> None:
    torso(x.contiguous(memory_format=layout)).sum().backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torso", action="append", choices=sorted(TORSOS), help="repeatable; default all")
    parser.add_argument("--rows", action="append", type=int, help="images per call, repeatable; default 8 16 168 672")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    tune_malloc()  # as the learner runs (runtime/tuning.py): its large activations would page-fault every call
    limit_threads(1)
    print("| torso | rows | forward NCHW (ms) | forward NHWC | fwd+bwd NCHW (ms) | fwd+bwd NHWC |")
    print("|---|---|---|---|---|---|")
    for name in args.torso or sorted(TORSOS):
        cls, shape = TORSOS[name]
        torso = cls(shape)
        for rows in args.rows or [8, 16, 168, 672]:
            x = torch.rand(rows, *shape)
            # The torsos convert by themselves where models._conv_layout says so. Here it passes its input
            # through, and each column converts (or not) before the call, so it measures the layout it names.
            cells = []
            with mock.patch.object(models, "_conv_layout", lambda x, always: x):
                for fn in (forward, both):
                    for layout in (torch.contiguous_format, torch.channels_last):
                        if cls is SmallTorso and rows <= models._DIRECT_CONV_ROWS and layout == torch.channels_last:
                            cells.append(float("nan"))  # its im2col kernel (SmallTorso.forward) takes NCHW only
                            continue
                        cells.append(median_ms(functools.partial(fn, torso, x, layout), args.reps))
            print(f"| {name} | {rows} | {cells[0]:.2f} | {cells[1]:.2f} | {cells[2]:.1f} | {cells[3]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
