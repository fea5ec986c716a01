"""Replay's cost and its effect on sample efficiency, each measured in one run of this script.

    .venv/bin/python benchmarks/replay.py speed                 # CartPole and Pong, fraction 0 vs 0.5 (~3 min)
    .venv/bin/python benchmarks/replay.py efficiency --only cartpole --seeds 10
    .venv/bin/python benchmarks/replay.py efficiency --only minatar-breakout --seeds 3
    .venv/bin/python benchmarks/replay.py report                # rewrite the table and figures, train nothing

`speed` trains each env at replay fraction 0 and 0.5 with the same batch size (so the replay run needs
half the fresh unrolls per update) and prints, from metrics.csv, the learner's wait for data, staging's
time per batch, learner updates/s and frames/s; then the ratios replay / no replay.

`efficiency` trains three arms per seed, all with the same fresh unrolls per update:
  fraction 0     the defaults (batch B, all fresh)
  fraction 0.5   batch 2B: B fresh + B replayed, so every fresh unroll is trained on about twice
  control        batch B, --updates-per-batch 2: as many gradient samples per fresh frame, without replay
(replay's gains are often just more updates per sample: Kielak 2020). It writes docs/replay_results.md
(frames to the target, or the area under the return curve) and docs/replay_<entry>.png. Runs go to
runs/replay/<entry>/seed<k>/<arm>; a finished run is reused (delete its folder to retrain).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(ROOT, "runs", "replay")


class Entry(NamedTuple):
    name: str
    env: str
    batch: int  # the defaults' batch size for this env
    frames: str
    target: float | None  # frames to reach it are compared; None: area under the curve
    args: tuple[str, ...] = ()


ENTRIES = {
    "cartpole": Entry("cartpole", "CartPole-v1", 16, "500k", 475.0),
    # 8 envs per actor in every arm (the default with replay, and the one its results were measured with): the
    # arms then differ only in the replayed half, not in how many envs an actor steps.
    "minatar-breakout": Entry("minatar-breakout", "MinAtar/Breakout-v0", 32, "3M", None, ("--envs-per-actor", "8")),
}
SPEED = {
    "cartpole": Entry("cartpole", "CartPole-v1", 16, "400k", None, ("--stop-at-return", "1e9")),
    "pong": Entry("pong", "ALE/Pong-v5", 16, "150k", None, ("--env-backend", "envpool")),
}


def arms(entry: Entry) -> dict[str, tuple[str, ...]]:
    b = entry.batch
    return {
        "fraction 0": (),
        "fraction 0.5": ("--batch-size", str(2 * b), "--replay-fraction", "0.5"),
        "control": ("--updates-per-batch", "2"),
    }


def run_dir(name: str, seed: int, arm: str) -> str:
    return os.path.join(RUNS, name, f"seed{seed}", arm.replace(" ", "-"))  # one folder name per arm: `plot` bands seeds by it


def train(env: str, frames: str, logdir: str, args: tuple[str, ...], seed: int = 0) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pronghorn.cli",
        "train",
        "--env",
        env,
        "--total-frames",
        frames,
        "--seed",
        str(seed),
        "--logdir",
        logdir,
        "--no-progress",
        "--log-interval",
        "2",
        "--restart",
        *args,
    ]
    print("$", " ".join(cmd[2:]), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"training failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(os.path.join(logdir, "done"), "w") as f:
        f.write(proc.stdout)


def rows(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def speed(entries: list[str]) -> None:
    print("env      fraction  learner wait ms/update  stage ms/batch  updates/s   frames/s")
    for name in entries:
        entry = SPEED[name]
        figures = {}
        for fraction in ("0", "0.5"):
            logdir = os.path.join(RUNS, "speed", name, f"fraction{fraction}")
            train(entry.env, entry.frames, logdir, (*entry.args, "--batch-size", str(entry.batch), "--replay-fraction", fraction))
            steady = rows(os.path.join(logdir, "metrics.csv"))[1:]  # the first interval holds start-up
            if not steady:
                sys.exit(f"{logdir}: too few metrics rows; raise the frames")
            figures[fraction] = (
                1000 * _per_update(steady, "learner_wait_s"),
                1000 * _per_update(steady, "stage_s"),
                statistics.fmean(float(r["learner_steps_per_s"]) for r in steady),
                statistics.fmean(float(r["fps"]) for r in steady),
            )
            wait, stage, ups, fps = figures[fraction]
            print(f"{name:9s}{fraction:>8s}  {wait:22.2f}  {stage:14.2f}  {ups:9.1f}  {fps:9,.0f}", flush=True)
        (w0, s0, u0, f0), (w1, s1, u1, f1) = figures["0"], figures["0.5"]
        print(
            f"{name:9s}   ratio  {w1 / max(w0, 1e-9):22.2f}  {s1 / max(s0, 1e-9):14.2f}  {u1 / u0:9.2f}  {f1 / f0:9.2f}"
            f"   (targets: wait <= 1.10, updates/s >= 0.95)"
        )


def _per_update(steady: list[dict], key: str) -> float:
    """A metrics.csv column averaged per update, not per row (rows cover equal times, not equal updates)."""
    weight = [float(r["learner_steps_per_s"]) for r in steady]
    return sum(float(r[key]) * w for r, w in zip(steady, weight)) / sum(weight)


def frames_to_target(episodes: list[dict], target: float) -> int | None:
    window: list[float] = []
    for row in episodes:
        window.append(float(row["episode_return"]))
        window = window[-100:]
        if len(window) == 100 and sum(window) / 100 >= target:
            return int(row["frames"])
    return None


def area_under_curve(episodes: list[dict], frames: int, points: int = 30) -> float:
    """Mean over an even frame grid of the mean return of the last 100 games finished by then."""
    total, i, window = 0.0, 0, []
    for k in range(1, points + 1):
        edge = frames * k / points
        while i < len(episodes) and int(episodes[i]["frames"]) <= edge:
            window = (window + [float(episodes[i]["episode_return"])])[-100:]
            i += 1
        total += sum(window) / len(window) if window else 0.0
    return total / points


def efficiency(names: list[str], seeds: int) -> None:
    for name in names:
        entry = ENTRIES[name]
        for arm, args in arms(entry).items():
            for seed in range(seeds):
                logdir = run_dir(name, seed, arm)
                if not os.path.exists(os.path.join(logdir, "done")):
                    train(entry.env, entry.frames, logdir, (*entry.args, *args), seed)
    report()


def report() -> None:
    from pronghorn.config import parse_count

    lines = [
        "# Replay: sample efficiency",
        "",
        "Written by `benchmarks/replay.py` from the runs under runs/replay/. Every arm takes the same fresh unrolls per update; "
        "`fraction 0.5` doubles the batch with replayed unrolls; `control` trains twice on each all-fresh batch (as many gradient samples per fresh frame, no replay).",
        "",
    ]
    for name, entry in ENTRIES.items():
        seeds_run = sorted(int(d[4:]) for d in _ls(os.path.join(RUNS, name)) if d.startswith("seed"))
        found = {arm: [run_dir(name, k, arm) for k in seeds_run if os.path.exists(os.path.join(run_dir(name, k, arm), "done"))] for arm in arms(entry)}
        if not any(found.values()):
            continue
        measure = (
            f"frames to a mean of {entry.target:g} over 100 games" if entry.target is not None else f"area under the return curve over {entry.frames} frames"
        )
        lines += [f"## {entry.env} ({measure})", "", "| arm | seeds | median | mean | each seed |", "|---|---|---|---|---|"]
        for arm, seeds in found.items():
            values = []
            for run in seeds:
                episodes = rows(os.path.join(run, "episodes.csv"))
                if entry.target is not None:
                    values.append(frames_to_target(episodes, entry.target))
                else:
                    values.append(area_under_curve(episodes, parse_count(entry.frames)))
            reached = [v for v in values if v is not None]
            med = (
                f"{statistics.median(reached):,.0f}"
                if entry.target is not None and len(reached) == len(values) and reached
                else (f"{statistics.median(reached):.2f}" if reached and entry.target is None else "not all reached")
            )
            mean = f"{statistics.fmean(reached):,.0f}" if entry.target is not None and reached else (f"{statistics.fmean(reached):.2f}" if reached else "-")
            each = ", ".join("not reached" if v is None else (f"{v:,}" if entry.target is not None else f"{v:.2f}") for v in values)
            lines.append(f"| {arm} | {len(values)} | {med} | {mean} | {each} |")
        lines.append("")
        figure = os.path.join(ROOT, "docs", f"replay_{name}.png")
        subprocess.run([sys.executable, "-m", "pronghorn.cli", "plot", *[r for runs in found.values() for r in runs], "-o", figure], cwd=ROOT, check=False)
        lines += [f"![{name}](replay_{name}.png)", ""]
    out = os.path.join(ROOT, "docs", "replay_results.md")
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {out}")


def _ls(path: str) -> list[str]:
    return os.listdir(path) if os.path.isdir(path) else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("speed", "efficiency", "report"))
    parser.add_argument("--only", nargs="*", help="entries: cartpole, pong (speed); cartpole, minatar-breakout (efficiency)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per arm (efficiency)")
    args = parser.parse_args()
    if args.mode == "speed":
        speed(args.only or list(SPEED))
    elif args.mode == "efficiency":
        unknown = [n for n in args.only or [] if n not in ENTRIES]
        if unknown:
            parser.error(f"unknown entries {unknown}: choose from {list(ENTRIES)}")
        efficiency(args.only or list(ENTRIES), args.seeds)
    else:
        report()


if __name__ == "__main__":
    main()
