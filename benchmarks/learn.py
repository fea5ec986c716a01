"""The learning suite: train each entry with pronghorn's defaults, then write a table and curves into docs/.

    .venv/bin/python benchmarks/learn.py                  # everything (hours on 2 cores)
    .venv/bin/python benchmarks/learn.py --quick          # CartPole and MinAtar Breakout, about 20 minutes
    .venv/bin/python benchmarks/learn.py --only pong --seeds 0 1 --parallel 2
    .venv/bin/python benchmarks/learn.py --report        # rewrite the table and figures, train nothing

Each entry runs `pronghorn train` once per seed into runs/learn/<entry>/seed<k>/<env>; a finished run is
reused, not retrained (delete its folder to retrain). The table, rewritten after every call, covers every
entry with a finished run, not only the ones just trained; an entry with none keeps its row and figure from
the previous report, marked † (so rerunning a few entries in a fresh checkout does not drop the rest). It gives the mean return of each run's last
100 games at the end of its budget, the published figure it is compared with, and where that comes from;
the figure draws every entry's seeds as mean and min-max band (`pronghorn plot`).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Entry(NamedTuple):
    name: str
    env: str
    frames: str
    args: tuple[str, ...]
    reference: str  # the published figure beside which the result is read, with its source
    target: float | None = None  # the return this suite expects of pronghorn's defaults


MINATAR_NOTE = "Young & Tian 2019 publish curves only (no table); read their figure at 5M frames"
# Dopamine's sticky-action baselines (google/dopamine, baselines/atari/data/<game>.json): the mean training return
# of each 1M-frame iteration, 5 seeds per agent, with the same protocol as here (sticky actions 0.25, frames counted
# as emulator frames). The figures are the mean over the 5 seeds of the iteration that ends at the entry's budget.
# TorchBeast's published Pong curve counts agent steps (4 frames each), so its "+18 at 8-13M steps" is 32-52M frames.
PUBLISHED = os.path.join(ROOT, "benchmarks", "published", "dopamine_atari.csv")  # benchmarks/published/from_dopamine.py


def dopamine(level: str, frames: int) -> str:
    """Dopamine's agents at `frames` on `level`, read from PUBLISHED (the figures the plots draw dashed)."""
    from pronghorn.plot import read_reference

    at = {label.split()[1]: dict(points).get(float(frames)) for label, points in read_reference(PUBLISHED)[level].items()}
    return f"Dopamine, sticky actions, mean of 5 seeds at {frames // 1_000_000}M frames: " + ", ".join(f"{a} {v:.1f}" for a, v in at.items())


SUITE = [
    Entry("cartpole", "CartPole-v1", "500k", (), "solved at 475 (Gymnasium's threshold)", 475.0),
    Entry(
        "pong",
        "ALE/Pong-v5",
        "10M",
        ("--env-backend", "envpool"),
        dopamine("ALE/Pong-v5", 10_000_000) + "; TorchBeast (no sticky actions) passes 0 at 20-28M frames",
        18.0,
    ),
    Entry(
        "pong-40m",
        "ALE/Pong-v5",
        "40M",
        ("--env-backend", "envpool"),
        dopamine("ALE/Pong-v5", 40_000_000) + "; TorchBeast (no sticky actions): +18 at 32-52M frames",
        18.0,
    ),
    Entry(
        "breakout",
        "ALE/Breakout-v5",
        "10M",
        ("--env-backend", "envpool"),
        dopamine("ALE/Breakout-v5", 10_000_000),
    ),
    *[
        Entry(f"minatar-{game.lower()}", f"MinAtar/{game}-v0", "5M", (), MINATAR_NOTE)  # -v0: all 6 actions, as in the paper
        for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
    ],
]
QUICK = ("cartpole", "minatar-breakout")


def logdir(entry: Entry, seed: int) -> str:
    return os.path.join(ROOT, "runs", "learn", entry.name, f"seed{seed}", entry.env.replace("/", "_"))


def finished(path: str) -> bool:
    return os.path.exists(os.path.join(path, "checkpoints", "latest")) and os.path.exists(os.path.join(path, "done"))


def command(entry: Entry, seed: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pronghorn.cli",
        "train",
        "--env",
        entry.env,
        "--total-frames",
        entry.frames,
        "--seed",
        str(seed),
        "--logdir",
        logdir(entry, seed),
        "--no-progress",
        "--log-interval",
        "30",
        *entry.args,
    ]


def last_100(path: str) -> tuple[float, int]:
    with open(os.path.join(path, "episodes.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    returns = [float(r["episode_return"]) for r in rows[-100:]]
    return (sum(returns) / len(returns) if returns else float("nan")), (int(rows[-1]["frames"]) if rows else 0)


def run_all(jobs: list[tuple[Entry, int]], parallel: int) -> None:
    """Run the jobs, `parallel` at a time; each run's console goes to <logdir>.log."""
    pending, running = list(jobs), []
    while pending or running:
        while pending and len(running) < parallel:
            entry, seed = pending.pop(0)
            path = logdir(entry, seed)
            if finished(path):
                print(f"learn: {entry.name} seed {seed}: already done in {path}", flush=True)
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            log = open(path + ".log", "a")
            print(f"learn: {entry.name} seed {seed}: {' '.join(command(entry, seed)[2:])}", flush=True)
            running.append((entry, seed, subprocess.Popen(command(entry, seed), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT), log, time.time()))
        time.sleep(5)
        for job in list(running):
            entry, seed, proc, log, start = job
            if proc.poll() is None:
                continue
            running.remove(job)
            log.close()
            if proc.returncode != 0:
                raise SystemExit(f"learn: {entry.name} seed {seed} failed (exit {proc.returncode}); see {logdir(entry, seed)}.log")
            open(os.path.join(logdir(entry, seed), "done"), "w").close()
            mean, frames = last_100(logdir(entry, seed))
            print(
                f"learn: {entry.name} seed {seed}: mean return of the last 100 games {mean:.2f} at {frames:,} frames, {time.time() - start:.0f} s", flush=True
            )


KEPT = "†"  # marks a row copied from the previous report: its runs are not in this checkout's runs/learn


def previous_rows(path: str) -> dict[str, str]:
    """The previous report's table rows by entry name (a suite that reruns some entries keeps the others)."""
    if not os.path.exists(path):
        return {}
    rows = {}
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 3 and cells[1] and not cells[1].startswith(("entry", "---")):
                rows[cells[1].rstrip(KEPT).strip()] = line.rstrip("\n")
    return rows


def report(entries: list[Entry], seeds: list[int], out_dir: str) -> str:
    lines = [
        "| entry | env | frames | " + " | ".join(f"seed {s}" for s in seeds) + " | target | published |",
        "|---|---|---|" + "---|" * len(seeds) + "---|---|",
    ]
    figures = []
    previous = previous_rows(os.path.join(out_dir, "learn_results.md"))
    kept = 0  # rows copied from the previous report
    for entry in SUITE:
        png = os.path.join(out_dir, f"learn_{entry.name}.png")
        if entry in entries:
            cells = []
            for seed in seeds:
                path = logdir(entry, seed)
                cells.append(f"{last_100(path)[0]:.2f}" if finished(path) else "not run")
            target = "" if entry.target is None else f"{entry.target:g}"
            lines.append(f"| {entry.name} | {entry.env} | {entry.frames} | " + " | ".join(cells) + f" | {target} | {entry.reference} |")
            runs = [logdir(entry, s) for s in seeds if finished(logdir(entry, s))]
            if runs:
                plot = [sys.executable, "-m", "pronghorn.cli", "plot", *runs, "-o", png, "--reference", PUBLISHED]  # dashed: Dopamine's curves
                subprocess.run(plot, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        elif entry.name in previous:
            # Not trained here: the previous report's row and figure stay, marked, rather than vanish.
            old = previous[entry.name].split("|")
            old[1] = f" {entry.name} {KEPT} "
            lines.append("|".join(old))
            kept += 1
        else:
            continue
        if os.path.exists(png):
            figures.append(f"![{entry.name}: mean and min-max band over seeds]({os.path.relpath(png, out_dir)})")
    note = f"\n\n{KEPT} copied from the previous report: not retrained with the code and defaults of the other rows.\n" if kept else "\n"
    table = "\n".join(lines) + note + "\n" + "\n\n".join(figures) + "\n"
    with open(os.path.join(out_dir, "learn_results.md"), "w") as f:
        f.write("# Learning suite (benchmarks/learn.py)\n\nMean return of the last 100 games at the end of each budget.\n\n" + table)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--only", nargs="+", metavar="ENTRY", help="entries by name: " + ", ".join(e.name for e in SUITE))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (each takes the cores its actors and learner ask for)")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs"))
    parser.add_argument("--report", action="store_true", help="write the table and figures from the finished runs; train nothing")
    args = parser.parse_args()
    names = set(args.only or (QUICK if args.quick else [e.name for e in SUITE]))
    unknown = names - {e.name for e in SUITE}
    if unknown:
        parser.error(f"unknown entries {sorted(unknown)}: pick from {', '.join(e.name for e in SUITE)}")
    entries = [e for e in SUITE if e.name in names]
    os.makedirs(args.out, exist_ok=True)
    if not args.report:
        run_all([(e, s) for e in entries for s in args.seeds], args.parallel)
    done = [e for e in SUITE if any(finished(logdir(e, s)) for s in args.seeds)]
    print(report(done, args.seeds, args.out))


if __name__ == "__main__":
    main()
