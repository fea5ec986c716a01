"""CartPole's vector env step with Gymnasium's own action check against pronghorn's one-reduction check.

`CartPoleVectorEnv.step` asserts `action_space.contains(actions)` at every step; `envs/vector.py` swaps in a
cheaper check. This times `VectorBatch.step` (process CPU time, random actions) with each space in turn,
alternating, and prints the medians.

  .venv/bin/python benchmarks/vector_action_check.py [--envs 16 --envs 512] [--rounds 7] [--steps 5000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pronghorn.envs.vector import VectorBatch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, action="append", help="environments in the batch (repeatable); default 16 and 512")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()
    warnings.simplefilter("ignore", UserWarning)  # the env's float64 observation bounds cast to float32
    for envs in args.envs or [16, 512]:
        batch = VectorBatch("CartPole-v1", list(range(envs)))
        batch.reset()
        ours = batch._env.action_space
        spaces = {"gymnasium": ours.space, "pronghorn": ours}
        rng = np.random.default_rng(0)
        actions = [rng.integers(0, 2, envs) for _ in range(64)]
        times: dict[str, list[float]] = {name: [] for name in spaces}
        for _ in range(args.rounds):
            for name, space in spaces.items():
                batch._env.action_space = space
                start = time.process_time()
                for i in range(args.steps):
                    batch.step(actions[i % 64])
                times[name].append((time.process_time() - start) / args.steps * 1e6)
        batch.close()
        medians = ", ".join(f"{name} check {np.median(t):.1f} us" for name, t in times.items())
        print(f"CartPole-v1 E={envs}: step with {medians} (medians of {args.rounds} rounds of {args.steps} steps)", flush=True)


if __name__ == "__main__":
    main()
