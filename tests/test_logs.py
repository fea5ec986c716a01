"""The Logger hands finished games to its sinks a few times a second, and always before a metrics row,
a flush (before each checkpoint) and the close."""

import pronghorn.logs as logs
from pronghorn.logs import Episode, Logger


class Recording:
    """A sink that keeps every call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def metrics(self, frames: int, values: dict[str, float]) -> None:
        self.calls.append(("metrics", frames))

    def episodes(self, episodes: list[Episode]) -> None:
        self.calls.append(("episodes", [e.frames for e in episodes]))

    def evaluation(self, result: logs.Evaluation) -> None:
        self.calls.append(("evaluation", result.frames))

    def close(self) -> None:
        self.calls.append(("close",))


def game(frames: int) -> Episode:
    return Episode(frames, "CartPole-v1", 10.0, 10, 0.0)


def test_games_reach_the_sinks_together_and_before_every_row_flush_and_close(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: clock[0])
    sink = Recording()
    logger = Logger([sink])
    logger.episodes([game(1), game(2)])
    logger.episodes([])
    clock[0] = 100.0 + logs._EPISODES_EVERY_S * 0.9
    logger.episodes([game(3)])
    assert sink.calls == []  # held: the last hand-over was under _EPISODES_EVERY_S ago
    clock[0] = 100.0 + logs._EPISODES_EVERY_S
    logger.episodes([game(4)])
    assert sink.calls == [("episodes", [1, 2, 3, 4])]  # in order, in one call
    logger.episodes([game(5)])
    logger.metrics(5, {"fps": 1.0})
    assert sink.calls[1:] == [("episodes", [5]), ("metrics", 5)]  # a row counts every game before it
    logger.metrics(6, {"fps": 1.0})
    assert sink.calls[3:] == [("metrics", 6)]  # nothing pending: no empty hand-over
    logger.episodes([game(7)])
    logger.flush()
    logger.episodes([game(8)])
    logger.close()
    assert sink.calls[4:] == [("episodes", [7]), ("episodes", [8]), ("close",)]
