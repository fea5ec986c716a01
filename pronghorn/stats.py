"""Per-level episode statistics: recent returns, human-normalised scores and the suite's summary.

They are logged with every metrics row, saved in checkpoints, and decide when a return target is reached.
"""

from __future__ import annotations

import collections
import math

from pronghorn import suites
from pronghorn.logs import Episode


class LevelStats:
    """The last 100 returns of each level, and how many episodes finished in all."""

    def __init__(self, levels: tuple[str, ...], saved: dict | None = None):
        saved = saved or {}
        self.levels = levels
        self.recent = {lv: collections.deque(saved.get("recent", {}).get(lv, []), maxlen=100) for lv in levels}
        self.episodes = int(saved.get("episodes", 0))
        self.generation = int(saved.get("generation", -1)) + 1  # how many times this run has been started

    def add(self, episodes: list[Episode]) -> None:
        self.episodes += len(episodes)
        for e in episodes:
            self.recent[e.level].append(e.episode_return)

    def recent_returns(self) -> list[float]:
        """Every level's recent episode returns together (up to 100 per level)."""
        return [r for q in self.recent.values() for r in q]

    def mean_return(self) -> float:
        """Mean over every level's recent episodes together; nan before the first."""
        values = self.recent_returns()
        return sum(values) / len(values) if values else float("nan")

    def level_means(self) -> dict[str, float]:
        return {lv: sum(q) / len(q) if q else float("nan") for lv, q in self.recent.items()}

    def reached(self, target: float | None) -> bool:
        """Every level's last 100 episodes average at least `target`."""
        return target is not None and all(len(q) == q.maxlen and sum(q) / len(q) >= target for q in self.recent.values())

    def level_metrics(self) -> dict[str, float]:
        """Per-level and suite figures for a metrics row. Every key is present from the first row on
        (nan until it has data) because metrics.csv fixes its columns with its first row."""
        means, row = self.level_means(), {}
        multi = len(self.levels) > 1
        hns = {lv: h for lv, m in means.items() if (h := suites.human_normalized(lv, m)) is not None}
        for lv in self.levels:
            if multi:
                row[f"{lv}/mean_return_100"] = means[lv]
            if lv in hns:
                row[f"{lv}/human_normalized"] = hns[lv]
        if multi:
            complete = all(math.isfinite(m) for m in means.values())  # a suite figure needs every level
            row["suite/mean_return"] = sum(means.values()) / len(means) if complete else float("nan")
            if len(hns) == len(self.levels):
                summary = suites.suite_summary(hns) if complete else {}
                for key in ("hns_mean", "hns_median", "hns_capped_mean"):
                    row[f"suite/{key}"] = summary.get(key, float("nan"))
        return row

    def state_dict(self) -> dict:
        return {"recent": {lv: list(q) for lv, q in self.recent.items()}, "episodes": self.episodes, "generation": self.generation}
