"""`pronghorn plot RUN [RUN ...] -o curves.png`: episode return against frames (or wall time), per level."""

from __future__ import annotations

import collections
import csv
import os
from typing import Sequence


def read_episodes(logdir: str) -> list[dict]:
    path = os.path.join(logdir, "episodes.csv")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: is {logdir!r} a pronghorn run folder?")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over up to `window` points (the same smoothing the console's mean return uses)."""
    out, acc, queue = [], 0.0, collections.deque()
    for v in values:
        queue.append(v)
        acc += v
        if len(queue) > window:
            acc -= queue.popleft()
        out.append(acc / len(queue))
    return out


def plot_runs(logdirs: Sequence[str], output: str, x: str = "frames", window: int = 100) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {d: read_episodes(d) for d in logdirs}
    levels = sorted({row["level"] for rows in runs.values() for row in rows})
    fig, axes = plt.subplots(1, max(1, len(levels)), figsize=(6 * max(1, len(levels)), 4), squeeze=False)
    for ax, level in zip(axes[0], levels or ["(no episodes)"]):
        for logdir, rows in runs.items():
            rows = [r for r in rows if r["level"] == level]
            if not rows:
                continue
            t0 = float(rows[0]["wall_time"])
            xs = [float(r["frames"]) if x == "frames" else float(r["wall_time"]) - t0 for r in rows]
            ax.plot(xs, smooth([float(r["episode_return"]) for r in rows], window), label=os.path.basename(os.path.normpath(logdir)))
        ax.set_title(level)
        ax.set_xlabel("environment frames" if x == "frames" else "wall-clock seconds")
        ax.set_ylabel(f"episode return (mean of last {window})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return output
