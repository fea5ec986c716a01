"""Where the time goes: py-spy samples the learner process and one actor of a running `pronghorn train`.

  .venv/bin/python benchmarks/profile_run.py -- --env CartPole-v1 --envs-per-actor 64 --batch-size 128
  .venv/bin/python benchmarks/profile_run.py --seconds 20 -- --env ALE/Pong-v5 --env-backend envpool
  .venv/bin/python benchmarks/profile_run.py --cores --seconds 20 -- --env CartPole-v1

Training starts, runs --warmup seconds, then each process is sampled for --seconds (py-spy, 200 Hz, all
threads, idle time left out); the script prints each process's functions with the largest share of
samples (inclusive: the function and what it calls; self: the function's own lines) and stops training.
With --cores it samples no stacks: it prints how many cores each process used over --seconds (user +
system CPU time over wall time), the machine's idle cores and the training frames/s of the same window.
py-spy comes with the dev extra (`make test` installs it).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def record(pid: int, seconds: float, out: str) -> subprocess.Popen:
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return subprocess.Popen(
        [spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "200", "-f", "raw", "-o", out, "--threads", "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def summarize(path: str, top: int) -> list[str]:
    total, unread, inclusive, own = 0, 0, collections.Counter(), collections.Counter()
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not count.isdigit():  # a frame's text broke the line (seen once, in a CartPole actor): left out, counted
                unread += 1
                continue
            n = int(count)
            frames = [fr for fr in stack.split(";")[1:] if not fr.startswith("thread ")]  # frame 0 names the thread
            if not frames:
                continue
            total += n
            own[frames[-1]] += n
            for frame in set(frames):
                inclusive[frame] += n
    lines = [f"  {total} samples" + (f" ({unread} lines of py-spy's output unreadable, left out)" if unread else "")]
    lines += [f"  inclusive {n / total:6.1%}  {frame[:140]}" for frame, n in inclusive.most_common(top)]
    lines += [f"  self      {n / total:6.1%}  {frame[:140]}" for frame, n in own.most_common(top)]
    return lines


def cores(pid: int, seconds: float, metrics: str) -> list[str]:
    """Cores each process of the run used over `seconds`, the machine's idle cores, and frames/s (metrics.csv)."""

    def frames() -> tuple[float, float]:
        with open(metrics) as f:
            last = list(csv.DictReader(f))[-1]
        return float(last["frames"]), float(last["time"])

    procs = [psutil.Process(pid), *psutil.Process(pid).children()]
    names = {p.pid: (p.cmdline() or [""])[0].split(" ")[0] for p in procs}
    before = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
    idle, start, f0 = psutil.cpu_times().idle, time.monotonic(), frames()
    time.sleep(seconds)
    f1, wall = frames(), time.monotonic() - start
    lines = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            used = (sum(p.cpu_times()[:2]) - before[p.pid]) / wall
            if used > 0.01:  # the multiprocessing helper process idles
                lines.append(f"  {names[p.pid] or p.pid:22s} {used:.2f} cores")
    lines.append(f"  idle                   {(psutil.cpu_times().idle - idle) / wall:.2f} cores")
    fps = (f1[0] - f0[0]) / (f1[1] - f0[1]) if f1[1] > f0[1] else float("nan")
    lines.append(f"  training               {fps:,.0f} frames/s over the same {seconds:.0f} s")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--cores", action="store_true", help="no stacks: each process's cores, idle cores and frames/s over --seconds")
    parser.add_argument("flags", nargs="*", help="pronghorn train flags (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pronghorn.cli", "train", *args.flags, "--total-frames", "10G", "--stop-at-return", "1e12"]
        cmd += ["--logdir", os.path.join(tmp, "run"), "--no-progress", "--log-interval", "1"]
        train = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(args.warmup)
            if args.cores:
                print("\n".join(cores(train.pid, args.seconds, os.path.join(tmp, "run", "metrics.csv"))))
                return
            actors = [c for c in psutil.Process(train.pid).children() if (c.cmdline() or [""])[0].startswith("pronghorn-actor-0")]
            targets = {"learner": train.pid, **({"actor 0": actors[0].pid} if actors else {})}
            spies = {name: (record(pid, args.seconds, os.path.join(tmp, f"{pid}.txt")), os.path.join(tmp, f"{pid}.txt")) for name, pid in targets.items()}
            for name, (spy, out) in spies.items():
                spy.wait(timeout=args.seconds + 60)
                print(f"{name} (pid {targets[name]}):")
                print("\n".join(summarize(out, args.top)) if os.path.exists(out) else "  py-spy wrote nothing")
        finally:
            train.send_signal(signal.SIGTERM)  # as Ctrl-C (SIGINT is ignored when this runs as a background job)
            train.wait(timeout=120)


if __name__ == "__main__":
    main()
