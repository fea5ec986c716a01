"""Faults inside a run: envs that raise, actors that fail, non-finite updates. Real processes, checked for leftovers."""

import subprocess

import torch

from tests.helpers import CLI, ENV, assert_no_leaks, read_csv, run_cli


def test_env_failures_are_logged_with_the_level_and_counted_in_metrics(tmp_path):
    logdir = tmp_path / "flaky"
    proc = subprocess.run(
        CLI
        + ["train", "--env", "tests.flaky_env:FlakyCartPole-v0", "--total-frames", "30k", "--logdir", str(logdir), "--log-interval", "0.5", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "of level tests.flaky_env:FlakyCartPole-v0 raised RuntimeError('injected failure" in proc.stderr
    assert int(read_csv(logdir / "metrics.csv")[-1]["env_failures"]) > 0
    assert_no_leaks()


def test_non_finite_updates_are_skipped_then_training_stops_with_the_last_good_state(tmp_path):
    logdir = tmp_path / "nan"
    proc, _, err = run_cli(
        ["train", "--env", "tests.flaky_env:NaNRewardCartPole-v0", "--logdir", str(logdir), "--no-progress", "--log-interval", "0.2", "--max-bad-updates", "5"]
    )
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 1 and "5 updates in a row had a non-finite loss or gradient" in last, err[-2000:]
    from pronghorn import checkpoint

    _, state = checkpoint.load_latest(str(logdir))
    assert state["learner"]["steps"] > 0
    assert all(torch.isfinite(v).all() for v in state["learner"]["agent"].values())  # the last good weights
    assert_no_leaks(owners=(proc.pid,))


def test_an_env_failing_in_a_row_stops_training_instead_of_spinning(tmp_path):
    proc, _, err = run_cli(
        ["train", "--env", "tests.flaky_env:AlwaysFailing-v0", "--logdir", str(tmp_path / "fail"), "--no-progress", "--max-env-failures", "3"]
    )
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 1 and "failed 3 times in a row (--max-env-failures 3)" in last and "AlwaysFailing-v0" in last, err[-2000:]
    assert_no_leaks(owners=(proc.pid,))


def test_a_failing_actor_stops_training_with_one_line_and_no_leftovers(tmp_path):
    proc = subprocess.Popen(
        CLI + ["train", "--env", "tests.flaky_env:BrokenReset-v0", "--logdir", str(tmp_path / "broken"), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("pronghorn: error: training stopped: actor") and "BrokenReset-v0" in last and "reset is broken" in last
    assert_no_leaks(owners=(proc.pid,))
