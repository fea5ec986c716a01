"""Soak: train for a long time while actors are killed and environments fail; report memory and losses.

  .venv/bin/python benchmarks/soak.py [--minutes 20] [--kill-every 30] [--warmup 120]

Runs `pronghorn train` on CartPole whose every env raises once per 1000 steps (tests/flaky_env.py),
SIGKILLs one actor (round robin) every --kill-every seconds, and prints:
  - the RSS of the learner and of each actor index after warm-up and at the end (growth in %),
  - actor restarts and env failures (from metrics.csv),
  - frames lost: the partial unrolls of killed actors (slots reclaimed x T x E), an upper bound,
  - whether any process or shared-memory segment is left after the run stops.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def actors(learner: psutil.Process) -> dict[int, psutil.Process]:
    found = {}
    for p in learner.children():
        try:
            title = (p.cmdline() or [""])[0]
        except psutil.NoSuchProcess:
            continue
        m = re.match(r"pronghorn-actor-(\d+)", title)
        if m:
            found[int(m.group(1))] = p
    return found


def rss(p: psutil.Process) -> float:
    try:
        return p.memory_info().rss / 2**20
    except psutil.NoSuchProcess:
        return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--kill-every", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=120.0)
    parser.add_argument("--num-actors", type=int, default=2)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="pronghorn-soak-")
    logdir = os.path.join(folder, "run")  # the run's own folder; the stderr log lies beside it
    T, E = 20, 8
    cmd = [
        sys.executable,
        "-m",
        "pronghorn.cli",
        "train",
        "--env",
        "tests.flaky_env:FlakyCartPole1000-v0",
        "--logdir",
        logdir,
        "--no-progress",
        "--total-frames",
        "100G",
        "--stop-at-return",
        "1e12",
        "--log-interval",
        "10",
        "--num-actors",
        str(args.num_actors),
        "--unroll-length",
        str(T),
        "--envs-per-actor",
        str(E),
        "--max-actor-restarts",
        "1000",
    ]
    err_path = os.path.join(folder, "stderr.log")
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PYTHONPATH": ROOT}, start_new_session=True)
    learner = psutil.Process(proc.pid)
    start = time.monotonic()
    end = start + args.minutes * 60
    next_kill = start + args.kill_every
    kills = 0
    warm = None
    print(f"soak: {args.minutes:.0f} min, an actor killed every {args.kill_every:.0f} s, env failure every 1000 steps; logdir {logdir}", flush=True)
    try:
        while time.monotonic() < end and proc.poll() is None:
            now = time.monotonic()
            if warm is None and now - start >= args.warmup:
                warm = {"learner": rss(learner), **{f"actor-{i}": rss(p) for i, p in actors(learner).items()}}
            if now >= next_kill:
                live = actors(learner)
                if live:
                    victim = sorted(live)[kills % len(live)]
                    try:
                        os.kill(live[victim].pid, signal.SIGKILL)
                        kills += 1
                    except ProcessLookupError:
                        pass
                next_kill += args.kill_every
            time.sleep(0.5)
        time.sleep(3)  # let the last replacement start before measuring
        final = {"learner": rss(learner), **{f"actor-{i}": rss(p) for i, p in actors(learner).items()}}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    with open(os.path.join(logdir, "metrics.csv"), newline="") as f:
        last = list(csv.DictReader(f))[-1]
    with open(err_path) as f:
        log = f.read()
    reclaimed = sum(len(re.findall(r"\d+", m)) for m in re.findall(r"reclaimed slots \[([^\]]*)\]", log))
    print(
        f"exit code {proc.returncode}; frames trained {int(float(last['frames'])):,}; kills sent {kills}; "
        f"actor restarts {last['actor_restarts']}; env failures {last['env_failures']}; skipped updates {last['skipped_updates']}"
    )
    print(f"frames lost (partial unrolls of killed actors, upper bound): {reclaimed} slots x {T} x {E} = {reclaimed * T * E:,}")
    print("RSS MiB after warm-up -> end:")
    for name in final:
        before = (warm or {}).get(name, float("nan"))
        print(f"  {name:9s} {before:8.1f} -> {final[name]:8.1f}  ({100 * (final[name] - before) / before:+.1f}%)")
    leftovers = [n for n in os.listdir("/dev/shm") if n.startswith(f"pronghorn-{proc.pid}-")]
    orphans = [p.pid for p in psutil.process_iter(["cmdline", "ppid"]) if (p.info["cmdline"] or [""])[0].startswith("pronghorn-actor") and p.info["ppid"] == 1]
    print(f"left behind: {len(leftovers)} shared-memory segments, {len(orphans)} orphaned actors")


if __name__ == "__main__":
    main()
