"""--wandb, offline (WANDB_MODE=offline: nothing leaves the machine); the run files are read back."""

import glob
import os
import subprocess

from tests.helpers import CLI, ENV, assert_no_leaks, read_wandb_records, run_cli

OFFLINE = {**ENV, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def _offline_runs(logdir):
    runs = {}
    for path in sorted(glob.glob(str(logdir / "wandb" / "offline-run-*" / "run-*.wandb"))):
        records = read_wandb_records(path)
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        keys = {item.key or "/".join(item.nested_key) for r in records if r.WhichOneof("record_type") == "history" for item in r.history.item}
        runs[path] = (run, keys)
    return runs


def test_wandb_gets_the_scalars_config_videos_and_curve_and_a_resume_continues_the_same_run(tmp_path, monkeypatch):
    logdir = tmp_path / "cartpole-wandb"
    common = ["train", "--logdir", str(logdir), "--no-progress", "--wandb", "--wandb-group", "tests", "--stop-at-return", "1e9", "--log-interval", "0.5"]

    def train(*extra):
        proc = subprocess.run(CLI + common + list(extra), capture_output=True, text=True, env=OFFLINE, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert_no_leaks()
        return proc

    train("--total-frames", "40k", "--eval-every", "20k", "--eval-episodes", "2", "--eval-video")
    run_id = (logdir / "wandb_id").read_text().strip()
    (first,) = _offline_runs(logdir).items()
    run, keys = first[1]
    assert run.run_id == run_id and run.display_name == "cartpole-wandb" and run.project == "pronghorn" and run.run_group == "tests"
    config = {u.key: u.value_json for u in run.config.update}
    assert config["env"] == '"CartPole-v1"' and config["total_frames"] == "40000" and config["batch_size"] == "16"  # the resolved config
    for key in (
        "frames",
        "learner/pg_loss",
        "learner/policy_lag_mean",
        "learner/fps",
        "CartPole-v1/episode_return",
        "eval/CartPole-v1/return",
        "eval/video/path",
        "curve/path",
    ):
        assert key in keys, (key, sorted(keys))

    train("--total-frames", "60k")  # resumes the logdir, and with it the W&B run
    runs = _offline_runs(logdir)
    assert len(runs) == 2 and {run.run_id for run, _ in runs.values()} == {run_id}


def test_wandb_without_the_package_exits_2_with_one_line(tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['wandb'] = None  # as if it were not installed\n")
    env = {**ENV, "PYTHONPATH": f"{hide}{os.pathsep}{ENV['PYTHONPATH']}"}
    proc = subprocess.run(CLI + ["train", "--wandb", "--logdir", str(tmp_path / "x")], capture_output=True, text=True, env=env, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and lines == ["pronghorn: error: --wandb needs the wandb package: pip install 'pronghorn[wandb]' (or pip install wandb)"]


def test_run_cli_is_unaffected_by_wandb_being_installed(tmp_path):
    proc, _, err = run_cli(["train", "--total-frames", "5k", "--logdir", str(tmp_path / "plain"), "--no-progress", "--stop-at-return", "1e9"])
    assert proc.returncode == 0 and not (tmp_path / "plain" / "wandb").exists() and not (tmp_path / "plain" / "wandb_id").exists(), err[-2000:]
