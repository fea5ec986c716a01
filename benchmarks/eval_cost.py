"""What --eval-every costs training, measured in one run: the same training with and without it.

    .venv/bin/python benchmarks/eval_cost.py                      # Pong (envpool), 600k frames each
    .venv/bin/python benchmarks/eval_cost.py --env CartPole-v1 --frames 2M --eval-every 200k

Prints the steady-state training frames/s of each run (metrics.csv rows after the first), the number of
evaluations that ran, and the ratio with / without.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args: argparse.Namespace, logdir: str, extra: list[str]) -> tuple[float, int]:
    cmd = [
        sys.executable,
        "-m",
        "pronghorn.cli",
        "train",
        "--env",
        args.env,
        "--total-frames",
        args.frames,
        "--logdir",
        logdir,
        "--restart",
        "--no-progress",
        "--log-interval",
        "5",
        "--stop-at-return",
        "1e9",
        *args.train_args,
        *extra,
    ]
    print("$", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(logdir, "metrics.csv"), newline="") as f:
        fps = [float(r["fps"]) for r in list(csv.DictReader(f))[1:]]
    evals = 0
    if os.path.exists(os.path.join(logdir, "eval.csv")):
        with open(os.path.join(logdir, "eval.csv"), newline="") as f:
            evals = len(list(csv.DictReader(f)))
    return statistics.fmean(fps), evals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--frames", default="600k")
    parser.add_argument("--eval-every", default="100k")
    parser.add_argument("--eval-episodes", default="2")
    parser.add_argument("--train-args", nargs="*", default=["--env-backend", "envpool"])
    args = parser.parse_args()
    base = os.path.join(ROOT, "runs", "eval_cost")
    plain, _ = run(args, os.path.join(base, "plain"), [])
    with_eval, evals = run(args, os.path.join(base, "eval"), ["--eval-every", args.eval_every, "--eval-episodes", args.eval_episodes])
    print(
        f"{args.env}: training frames/s without evaluation {plain:,.0f}, with --eval-every {args.eval_every} "
        f"--eval-episodes {args.eval_episodes} {with_eval:,.0f} ({evals} evaluations ran); ratio {with_eval / plain:.2f}"
    )


if __name__ == "__main__":
    main()
