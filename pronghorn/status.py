"""`pronghorn status RUN`: where a run stands, read from its files (works while it trains)."""

from __future__ import annotations

import csv
import json
import os
import time

from pronghorn import checkpoint


def _rows(path: str) -> list[dict]:
    try:
        with open(path, newline="") as f:
            return [r for r in csv.DictReader(f) if None not in r.values()]  # skip a row being written
    except FileNotFoundError:
        return []


def run_status(logdir: str) -> str:
    config_path = os.path.join(logdir, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{logdir!r} has no config.json: is it a pronghorn run folder?")
    with open(config_path) as f:
        cfg = json.load(f)
    metrics = _rows(os.path.join(logdir, "metrics.csv"))
    episodes = _rows(os.path.join(logdir, "episodes.csv"))
    lines = [f"run        {logdir}  ({cfg['env']}, {cfg['num_actors']} actors x {cfg['envs_per_actor']} envs)"]
    if metrics:
        last = metrics[-1]
        age = time.time() - os.path.getmtime(os.path.join(logdir, "metrics.csv"))
        frames = int(float(last["frames"]))
        lines.append(f"frames     {frames:,} of {int(cfg['total_frames']):,} ({100 * frames / int(cfg['total_frames']):.1f}%)")
        lines.append(f"fps        {float(last['fps']):,.0f} (learner steps/s {float(last['learner_steps_per_s']):.1f}); last row written {age:.0f} s ago")
    else:
        lines.append("frames     no metrics row yet")
    ckpts = checkpoint.candidates(logdir)
    lines.append(f"checkpoint {ckpts[0] if ckpts else 'none yet'}")
    levels = sorted({r["level"] for r in episodes})
    for level in levels:
        returns = [float(r["episode_return"]) for r in episodes if r["level"] == level][-100:]
        mean = sum(returns) / len(returns)
        lines.append(f"returns    {level}: mean of last {len(returns)} = {mean:.2f} (min {min(returns):.1f}, max {max(returns):.1f})")
    if not levels:
        lines.append("returns    no finished episode yet")
    return "\n".join(lines)
