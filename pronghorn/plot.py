"""`pronghorn plot RUN [RUN ...] -o curves.png`: episode return against frames (or wall time), per level."""

from __future__ import annotations

import collections
import csv
import os
from collections.abc import Sequence


def read_episodes(logdir: str) -> list[dict]:
    path = os.path.join(logdir, "episodes.csv")
    if not os.path.exists(path):
        if os.path.exists(os.path.join(logdir, "config.json")):  # a run folder: episodes.csv is written at the first game's end
            raise FileNotFoundError(f"no game has finished in {logdir!r} yet, so it has no episodes.csv to plot")
        raise FileNotFoundError(f"{path} does not exist: is {logdir!r} a pronghorn run folder?")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_suite(logdir: str) -> tuple[str, list[tuple[float, float, float]]]:
    """The run's suite figure (median human-normalised score for Atari suites, else the mean over levels
    of each level's recent return) as (frames, seconds, value) rows; ("", []) for a one-level run."""
    path = os.path.join(logdir, "metrics.csv")
    if not os.path.exists(path):
        return "", []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for key, label in (("suite/hns_median", "median human-normalised score"), ("suite/mean_return", "mean over levels of the return (last 100)")):
        points = [(float(r["frames"]), float(r["time"]), float(r[key])) for r in rows if r.get(key) not in (None, "", "nan")]
        if points:
            return label, points
    return "", []


def read_reference(path: str) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Published curves to draw beside the runs: a CSV with columns level, label, frames, return (one row per
    point, e.g. a paper's figure at each million frames) -> {level: {label: [(frames, return), ...]}}.

    Raises FileNotFoundError or ValueError with what is wrong (a missing column, a value that is not a number)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"reference CSV {path!r} does not exist: pass a file with columns level,label,frames,return")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"level", "label", "frames", "return"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path} lacks the column(s) {', '.join(sorted(missing))}: a reference CSV has level,label,frames,return")
        curves: dict[str, dict[str, list[tuple[float, float]]]] = collections.defaultdict(lambda: collections.defaultdict(list))
        for line, row in enumerate(reader, start=2):
            try:
                point = (float(row["frames"]), float(row["return"]))
            except (TypeError, ValueError):
                raise ValueError(f"{path} line {line}: frames and return must be numbers, got {row['frames']!r} and {row['return']!r}") from None
            curves[row["level"]][row["label"]].append(point)
    return {level: {label: sorted(points) for label, points in labels.items()} for level, labels in curves.items()}


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over up to `window` points (the same smoothing the console's mean return uses)."""
    out: list[float] = []
    acc, queue = 0.0, collections.deque[float]()
    for v in values:
        queue.append(v)
        acc += v
        if len(queue) > window:
            acc -= queue.popleft()
        out.append(acc / len(queue))
    return out


def _curve(rows: list[dict], x: str, window: int) -> tuple[list[float], list[float]]:
    t0 = float(rows[0]["wall_time"]) if rows else 0.0
    xs = [float(r["frames"]) if x == "frames" else float(r["wall_time"]) - t0 for r in rows]
    return xs, smooth([float(r["episode_return"]) for r in rows], window)


def _label(ax, title: str, x: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel("environment frames" if x == "frames" else "wall-clock seconds")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)


def plot_runs(
    logdirs: Sequence[str],
    output: str,
    x: str = "frames",
    window: int = 100,
    size: tuple[float, float] = (6, 4),
    dpi: int = 100,
    reference: str | None = None,
) -> str:
    """One panel per level; one line per run, or mean and min-max band for runs that share a folder name.

    reference: a CSV of published curves (see read_reference), drawn dashed on the panels of their levels up
    to the frames the runs reach (frames axis only)."""
    if reference is not None and x != "frames":
        raise ValueError("published curves are given in frames: drop --reference or plot with --x frames")
    published = read_reference(reference) if reference is not None else {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    runs = {d: read_episodes(d) for d in logdirs}
    groups: dict[str, list[str]] = collections.defaultdict(list)  # e.g. seed0/pong and seed1/pong share "pong"
    for d in logdirs:
        groups[os.path.basename(os.path.normpath(d))].append(d)
    levels = sorted({row["level"] for rows in runs.values() for row in rows})
    suite = {d: read_suite(d) for d in logdirs} if len(levels) > 1 else {}
    panels = len(levels or [0]) + bool(suite)
    cols = min(panels, 5)
    rows = -(-panels // cols)
    fig, grid_axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    axes = list(grid_axes.flat)
    for ax in axes[panels:]:
        ax.set_visible(False)
    if suite:
        ax = axes[panels - 1]  # the suite's panel comes last
        labels = {label for label, _ in suite.values() if label}
        for d, (_, points) in suite.items():
            if points:
                ax.plot([p[0] if x == "frames" else p[1] for p in points], [p[2] for p in points], label=os.path.basename(os.path.normpath(d)))
        _label(ax, "suite", x, " / ".join(sorted(labels)) or "no suite figure yet")
    for ax, level in zip(axes, levels or ["(no episodes yet)"]):
        reach = 0.0  # the furthest x any run on this panel gets to
        for name, members in groups.items():
            curves = [_curve([r for r in runs[d] if r["level"] == level], x, window) for d in members]
            curves = [c for c in curves if c[0]]
            reach = max([reach, *(c[0][-1] for c in curves)])
            if len(curves) == 1:
                ax.plot(*curves[0], label=name)
            elif curves:
                grid = np.linspace(0, min(c[0][-1] for c in curves), 200)  # the span every run covers
                ys = np.stack([np.interp(grid, c[0], c[1]) for c in curves])
                line = ax.plot(grid, ys.mean(0), label=f"{name} (mean of {len(curves)})")[0]
                ax.fill_between(grid, ys.min(0), ys.max(0), color=line.get_color(), alpha=0.2)
        for label, published_points in published.get(level, {}).items():
            # The runs' span (a 10M-frame run is not drawn against 200M), with 2 % to spare: a run's last game
            # ends a little short of its budget, and the published point at the budget belongs beside it.
            shown = [p for p in published_points if p[0] <= reach * 1.02]
            if shown:
                ax.plot([p[0] for p in shown], [p[1] for p in shown], linestyle="--", marker=".", linewidth=1, label=label)
        _label(ax, level, x, f"episode return (mean of last {window})")
    fig.tight_layout()
    fig.savefig(output, dpi=dpi)  # no bbox cropping: the PNG is exactly size * dpi pixels
    plt.close(fig)
    return output


def write_curve(logdir: str) -> str:
    """The run's own curve, <logdir>/curve.png; returns its path, or why it was not written."""
    try:
        return plot_runs([logdir], os.path.join(logdir, "curve.png"))
    except (OSError, ValueError) as exc:  # a missing curve must not turn a finished run into a failure
        return f"not written ({exc})"
