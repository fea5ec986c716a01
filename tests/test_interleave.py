"""benchmarks/interleave.py: training paused while the component limit is timed, and frames/s over the windows only."""

import os

import psutil

from pronghorn import Config
from tests.helpers import assert_no_leaks, load_benchmark

interleave = load_benchmark("interleave")


def _row(frames: float, time: float) -> dict[str, str]:
    return {"frames": str(frames), "time": str(time)}


def test_window_rate_leaves_out_the_intervals_that_span_a_pause():
    rows = [_row(0, 1.0), _row(100, 2.0), _row(210, 3.1), _row(230, 9.2), _row(330, 10.2)]  # 3.1 -> 9.2 spans a pause
    frames, seconds = interleave.window_rate(rows, log_interval=1.0)
    assert frames == 100 + 110 + 100
    assert abs(seconds - (1.0 + 1.1 + 1.0)) < 1e-9
    assert interleave.window_rate(rows[:1], 1.0) == (0.0, 0.0)  # one row: no interval


def test_components_are_timed_while_every_training_process_is_stopped():
    cfg = Config(env="CartPole-v1", num_actors=2, envs_per_actor=4, batch_size=4, unroll_length=10)
    seen: list[tuple[set[int], set[str]]] = []
    learners: set[int] = set()

    def time_components():
        # The run's processes: its learner, a child of this process, leads a session of its own (its process group
        # id is its pid), and its actors are in it. Other children of this process (an earlier test's resource
        # tracker) are not.
        learner = next(p for p in psutil.Process().children() if os.getpgid(p.pid) == p.pid)
        procs = [p for p in psutil.Process().children(recursive=True) if os.getpgid(p.pid) == learner.pid]
        seen.append(({p.pid for p in procs}, {p.status() for p in procs}))
        learners.add(learner.pid)
        return {"env": 1.0, "inference": 2.0, "learner": 3.0}, "stepper"

    fps, costs, stepper = interleave.interleaved(cfg, time_components, pauses=2, window_s=2.5)
    assert fps > 0 and stepper == "stepper"
    assert costs == [{"env": 1.0, "inference": 2.0, "learner": 3.0}] * 2
    assert len(seen) == 2
    for pids, statuses in seen:
        assert len(pids) >= 3  # the learner and its two actors
        assert statuses == {psutil.STATUS_STOPPED}
    assert len(learners) == 1
    assert_no_leaks(owners=tuple(learners))
