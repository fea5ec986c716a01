"""Rebuild dopamine_atari.csv from Dopamine's published baseline data.

    git clone https://github.com/google/dopamine /tmp/dopamine
    .venv/bin/python benchmarks/published/from_dopamine.py /tmp/dopamine > benchmarks/published/dopamine_atari.csv

Dopamine's baselines/atari/data/<game>.json holds, for each agent, 5 runs as consecutive lists of
{"Iteration": i, "Value": v}: v is the mean return of the training episodes of iteration i, which covers
frames [i, i+1) million under Dopamine's protocol (sticky actions 0.25). Each CSV row is one agent's mean
over its 5 runs at the end of an iteration, (i + 1) million frames, as `pronghorn plot --reference` reads it,
for the first 50M frames.
"""

from __future__ import annotations

import collections
import csv
import json
import os
import statistics
import sys

GAMES = {"pong": "ALE/Pong-v5", "breakout": "ALE/Breakout-v5"}
AGENTS = ("DQN", "C51", "Rainbow", "IQN")
MAX_ITERATIONS = 50  # 50M frames: past the learning suite's longest budget (40M); Dopamine's runs go to 200M


def main(dopamine: str) -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["level", "label", "frames", "return"])
    for game, level in GAMES.items():
        with open(os.path.join(dopamine, "baselines", "atari", "data", f"{game}.json")) as f:
            points = json.load(f)
        runs: dict[str, list[dict[int, float]]] = collections.defaultdict(list)
        for point in points:
            if point["Iteration"] == 0:  # each run starts again at iteration 0
                runs[point["Agent"]].append({})
            runs[point["Agent"]][-1][point["Iteration"]] = point["Value"]
        for agent in AGENTS:
            seeds = runs[agent]
            iteration = 0
            while iteration < MAX_ITERATIONS and all(iteration in run for run in seeds):
                mean = statistics.mean(run[iteration] for run in seeds)
                out.writerow([level, f"Dopamine {agent} (sticky, mean of {len(seeds)})", (iteration + 1) * 1_000_000, round(mean, 3)])
                iteration += 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: from_dopamine.py PATH_TO_DOPAMINE_CHECKOUT")
    main(sys.argv[1])
