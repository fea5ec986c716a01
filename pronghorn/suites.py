"""Named level suites and the Atari human-normalised score.

`expand("atari5")` gives the suite's level ids; `human_normalized(level, score)` maps a raw Atari score
to 0 (random play) .. 1 (a professional human tester), the scale IMPALA and its successors report in.
"""

from __future__ import annotations

import math
import statistics

# Random and human reference scores for the 57 Atari games, (random, human), as published with
# Mnih et al. 2015 / van Hasselt et al. 2016 and collected in DeepMind's DQN Zoo (atari_data.py).
# Both were measured with up to 30 no-op starts and a 108,000-frame (30 minute) episode cap.
ATARI_SCORES: dict[str, tuple[float, float]] = {
    "Alien": (227.8, 7127.7),
    "Amidar": (5.8, 1719.5),
    "Assault": (222.4, 742.0),
    "Asterix": (210.0, 8503.3),
    "Asteroids": (719.1, 47388.7),
    "Atlantis": (12850.0, 29028.1),
    "BankHeist": (14.2, 753.1),
    "BattleZone": (2360.0, 37187.5),
    "BeamRider": (363.9, 16926.5),
    "Berzerk": (123.7, 2630.4),
    "Bowling": (23.1, 160.7),
    "Boxing": (0.1, 12.1),
    "Breakout": (1.7, 30.5),
    "Centipede": (2090.9, 12017.0),
    "ChopperCommand": (811.0, 7387.8),
    "CrazyClimber": (10780.5, 35829.4),
    "Defender": (2874.5, 18688.9),
    "DemonAttack": (152.1, 1971.0),
    "DoubleDunk": (-18.6, -16.4),
    "Enduro": (0.0, 860.5),
    "FishingDerby": (-91.7, -38.7),
    "Freeway": (0.0, 29.6),
    "Frostbite": (65.2, 4334.7),
    "Gopher": (257.6, 2412.5),
    "Gravitar": (173.0, 3351.4),
    "Hero": (1027.0, 30826.4),
    "IceHockey": (-11.2, 0.9),
    "Jamesbond": (29.0, 302.8),
    "Kangaroo": (52.0, 3035.0),
    "Krull": (1598.0, 2665.5),
    "KungFuMaster": (258.5, 22736.3),
    "MontezumaRevenge": (0.0, 4753.3),
    "MsPacman": (307.3, 6951.6),
    "NameThisGame": (2292.3, 8049.0),
    "Phoenix": (761.4, 7242.6),
    "Pitfall": (-229.4, 6463.7),
    "Pong": (-20.7, 14.6),
    "PrivateEye": (24.9, 69571.3),
    "Qbert": (163.9, 13455.0),
    "Riverraid": (1338.5, 17118.0),
    "RoadRunner": (11.5, 7845.0),
    "Robotank": (2.2, 11.9),
    "Seaquest": (68.4, 42054.7),
    "Skiing": (-17098.1, -4336.9),
    "Solaris": (1236.3, 12326.7),
    "SpaceInvaders": (148.0, 1668.7),
    "StarGunner": (664.0, 10250.0),
    "Surround": (-10.0, 6.5),
    "Tennis": (-23.8, -8.3),
    "TimePilot": (3568.0, 5229.2),
    "Tutankham": (11.4, 167.6),
    "UpNDown": (533.4, 11693.2),
    "Venture": (0.0, 1187.5),
    "VideoPinball": (16256.9, 17667.9),
    "WizardOfWor": (563.5, 4756.5),
    "YarsRevenge": (3092.9, 54576.9),
    "Zaxxon": (32.5, 9173.3),
}

# MinAtar (Young & Tian 2019): 10x10 grids; channels per game differ (4 to 10), all share 6 actions.
MINATAR_CHANNELS = {"Asterix": 4, "Breakout": 4, "Freeway": 7, "Seaquest": 10, "SpaceInvaders": 6}

SUITES: dict[str, tuple[str, ...]] = {
    "atari57": tuple(f"ALE/{game}-v5" for game in ATARI_SCORES),
    # Aitchison, Sweetser and Hutter 2023, "Atari-5": the five games whose scores best predict the Atari-57 median.
    "atari5": tuple(f"ALE/{game}-v5" for game in ("BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert")),
    "minatar": tuple(f"MinAtar/{game}-v0" for game in MINATAR_CHANNELS),
}

# Suites users ask for that cannot run here; the message says why and what to use instead.
UNAVAILABLE = {
    "procgen": "Procgen has no Gymnasium package for Python 3.11 (procgen-gym needs Python >= 3.13; procgen and its "
    "mirrors speak gym3 and pin numpy < 2): use atari5, atari57, minatar or a comma-separated list of ids",
}


def suite_name(levels: str) -> str | None:
    """The suite `levels` names (case and spaces ignored), or None for a list of level ids."""
    name = levels.strip().lower()
    return name if name in SUITES else None


def expand(levels: str) -> tuple[str, ...]:
    """A suite name or a comma-separated list of level ids -> the level ids, in order."""
    suite = suite_name(levels)
    if suite is not None:
        return SUITES[suite]
    return tuple(part.strip() for part in levels.split(",") if part.strip())


def atari_game(level: str) -> str | None:
    """'ALE/Pong-v5' -> 'Pong'; None for a level that is not an Atari game with reference scores."""
    if not level.startswith("ALE/"):
        return None
    game = level[len("ALE/") :].rsplit("-v", 1)[0]
    return game if game in ATARI_SCORES else None


def minatar_game(level: str) -> str | None:
    """'MinAtar/Breakout-v0' -> 'Breakout'; None otherwise."""
    if not level.startswith("MinAtar/"):
        return None
    game = level[len("MinAtar/") :].rsplit("-v", 1)[0]
    return game if game in MINATAR_CHANNELS else None


def human_normalized(level: str, score: float) -> float | None:
    """(score - random) / (human - random) for an Atari level; None for other levels."""
    game = atari_game(level)
    if game is None:
        return None
    random, human = ATARI_SCORES[game]
    return (score - random) / (human - random)


def suite_summary(hns: dict[str, float]) -> dict[str, float]:
    """Mean, median and capped mean (each level's score capped at human level, 1.0) of per-level HNS."""
    values = [v for v in hns.values() if math.isfinite(v)]
    if not values:
        return {}
    return {
        "hns_mean": sum(values) / len(values),
        "hns_median": statistics.median(values),
        "hns_capped_mean": sum(min(v, 1.0) for v in values) / len(values),
    }
