"""--eval-every: greedy evaluations of checkpoints in a separate process, logged at the frames asked for."""

import json
import os

import psutil
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pronghorn.evaluate import evaluate
from tests.helpers import assert_no_leaks, read_csv, run_cli

BATCH_FRAMES = 16 * 20  # CartPole defaults: one update's frames


def test_evaluations_land_at_the_asked_frames_in_every_log_and_match_pronghorn_evaluate(tmp_path):
    logdir = tmp_path / "run"
    proc, out, err = run_cli(
        [
            "train",
            "--logdir",
            str(logdir),
            "--no-progress",
            "--total-frames",
            "60k",
            "--stop-at-return",
            "1e9",
            "--eval-every",
            "20k",
            "--eval-episodes",
            "2",
            "--eval-video",
            "--log-interval",
            "0.5",
        ]
    )
    assert proc.returncode == 0, err[-3000:]
    rows = read_csv(logdir / "eval.csv")
    frames = [int(r["frames"]) for r in rows]
    # Each evaluation is of the first checkpoint at or past a multiple of 20k; one due while another runs is
    # skipped (logged), but the last one is always evaluated before training ends.
    assert all(f % 20_000 < BATCH_FRAMES for f in frames) and frames == sorted(frames), frames
    assert frames[-1] // 20_000 == 3 and len(frames) >= 2
    skipped = err.count("skipped: the previous one is still running")
    assert len(frames) + skipped >= 3
    assert all(r["level"] == "CartPole-v1" and int(r["episodes"]) == 2 for r in rows)
    assert f"eval at {frames[-1]:,} frames (2 greedy games per level): CartPole-v1" in out + err

    # metrics.csv: the columns exist from the first row; the last row holds the last evaluation.
    metrics = read_csv(logdir / "metrics.csv")
    assert "eval/CartPole-v1/return" in metrics[0] and int(float(metrics[-1]["eval/frames"])) == frames[-1]
    assert float(metrics[-1]["eval/CartPole-v1/return"]) == float(rows[-1]["mean_return"])

    # TensorBoard: each evaluation at its checkpoint's frames, once, and a video for each.
    events = EventAccumulator(str(logdir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("eval/CartPole-v1/return")] == frames
    assert [i.step for i in events.Images("eval/video")] == frames
    assert all((logdir / "eval" / f"video-{f:012d}.mp4").stat().st_size > 0 for f in frames)

    # The same code as `pronghorn evaluate`: the last checkpoint, same seed, same greedy games.
    again = evaluate(str(logdir), str(logdir / "checkpoints" / f"ckpt-{frames[-1]:012d}.pt"), 2, greedy=True, seed=10_000 + frames[-1])
    assert again["levels"]["CartPole-v1"]["return"]["mean"] == float(rows[-1]["mean_return"]), json.dumps(again)
    assert_no_leaks(owners=(proc.pid,))


def test_the_evaluator_reports_a_failed_evaluation_and_its_own_death(tmp_path):
    import glob

    from pronghorn.runtime.evaluator import Evaluator

    semaphores = set(glob.glob("/dev/shm/sem.mp-*"))
    evaluator = Evaluator(str(tmp_path), 1, False, seed=0, actor_nice=4)
    try:
        assert set(glob.glob("/dev/shm/sem.mp-*")) <= semaphores  # a pipe, no queue: nothing a SIGKILL could leave
        assert evaluator.submit(str(tmp_path / "missing.pt"), 10)
        assert not evaluator.submit(str(tmp_path / "missing.pt"), 20)  # one evaluation in flight at a time
        (failed,) = evaluator.poll(timeout=120)
        assert failed.frames == 10 and failed.returns == {} and failed.error
        # It served a request, so it has lowered its priority: 10 below the actors' (4 here), 14 below ours.
        assert psutil.Process(evaluator._process.pid).nice() == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 14)
        assert evaluator.poll() == []  # nothing in flight, nothing to report
        evaluator._process.kill()
        assert evaluator.submit(str(tmp_path / "missing.pt"), 30)  # the dead end is not an error for the learner
        (died,) = evaluator.poll(timeout=30)
        assert died.error == f"the evaluation process died (exit code {evaluator._process.exitcode})" and died.frames == -1
    finally:
        evaluator.close()
    assert_no_leaks()
