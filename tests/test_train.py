"""End to end: `pronghorn.train` and `pronghorn train` with real actors, files, signals and bad input."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import pronghorn
from tests.helpers import CLI, ENV, assert_no_leaks, read_csv, run_cli, start_training, wait_for_file


def test_train_writes_every_log_and_leaves_nothing_behind(tmp_path):
    cfg = pronghorn.Config(total_frames=40_000, logdir=str(tmp_path / "run"), log_interval=0.5, progress=False, stop_at_return=1e9)
    result = pronghorn.train(cfg)
    assert result.frames >= 40_000 and result.learner_steps >= 1 and result.episodes > 0
    logdir = tmp_path / "run"
    config = json.loads((logdir / "config.json").read_text())
    assert config["env"] == "CartPole-v1" and config["batch_size"] == 16 and config["learning_rate"] == 3e-3  # resolved defaults
    episodes = read_csv(logdir / "episodes.csv")
    assert list(episodes[0]) == ["frames", "level", "episode_return", "episode_frames", "wall_time"]
    assert all(r["level"] == "CartPole-v1" and float(r["episode_return"]) == float(r["episode_frames"]) for r in episodes)  # CartPole pays 1 a frame
    metrics = read_csv(logdir / "metrics.csv")
    assert metrics, "no metrics row"
    for key in (
        "fps",
        "learner_steps_per_s",
        "pg_loss",
        "baseline_loss",
        "entropy_loss",
        "entropy",
        "grad_norm",
        "policy_lag_min",
        "policy_lag_mean",
        "policy_lag_max",
        "full_queue_occupancy",
        "learner_wait_s",
        "stage_s",
        "env_failures",
        "actor_restarts",
        "skipped_updates",
    ):
        assert key in metrics[-1], key
    assert float(metrics[-1]["policy_lag_min"]) >= 0
    frames = [int(r["frames"]) for r in metrics]
    assert frames == sorted(frames)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir)).Reload()
    tags = events.Tags()["scalars"]
    assert "CartPole-v1/episode_return" in tags and "CartPole-v1/episode_frames" in tags and "learner/policy_lag_mean" in tags
    assert result.checkpoint and os.path.exists(result.checkpoint)
    assert_no_leaks()


def test_ctrl_c_stops_every_process_and_completes_the_files(tmp_path):
    logdir = tmp_path / "interrupted"
    proc = start_training(
        logdir,
        "--total-frames",
        "100M",
        "--stop-at-return",
        "1e9",
        start_new_session=True,
        # A suite launched in the background (`cmd &` in a script) hands its children SIGINT ignored, and Python
        # then installs no KeyboardInterrupt handler: give the child the terminal's default, as a foreground run has.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_for_file(logdir / "metrics.csv", proc)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the whole foreground group
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGUSR1)  # faulthandler: every thread's stack, to see where it hangs
            time.sleep(2)
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"no exit within 60 s of SIGINT; stacks:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted after" in out and "Traceback" not in err
    assert glob.glob(str(logdir / "checkpoints" / "ckpt-*.pt"))
    rows = read_csv(logdir / "episodes.csv")
    assert rows and all(len(r) == 5 and None not in r.values() for r in rows)
    assert_no_leaks(owners=(proc.pid,))


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--env", "NoSuchEnv-v0"], "unknown environment 'NoSuchEnv-v0'"),
        (["--num-actors", "0"], "--num-actors is 0: it must be at least 1"),
        (["--batch-size", "-8"], "--batch-size is -8"),
        (["--unroll-length", "0"], "--unroll-length is 0"),
        (["--batch-size", "12"], "not a multiple of --envs-per-actor 16"),
        (["--batch-size", "64", "--num-buffers", "4"], "the actors could never fill a batch"),
        (["--total-frames", "lots"], "--total-frames"),
        (["--lr-decay-frames", "-5"], "--lr-decay-frames: cannot read '-5'"),
        (["--vtrace-lambda", "1.5"], "--vtrace-lambda is 1.5"),
        (["--ppo-clip", "0", "--updates-per-batch", "2"], "--ppo-clip is 0.0: it must lie in (0, 1)"),
        (["--ppo-clip", "0.1"], "--ppo-clip clips the passes after a batch's first, and there is one"),
        (["--env", "CartPole-v1", "--model", "nature"], "--model nature needs image observations"),
        (["--model", "huge"], "--model"),
        (["--learning-rate", "nan"], "--learning-rate"),
        (["--logdir", "/etc/passwd/run"], "cannot write to logdir"),
        (["--env", "tests.flaky_env:make_wrong_dtype"], "returned an observation of dtype float64 from step()"),
        (["--replay-fraction", "1"], "--replay-fraction is 1.0: it must lie in [0, 1)"),
        (["--replay-fraction", "0.3"], "--replay-fraction 0.3 leaves 11 fresh unrolls per batch of 16"),
        (["--replay-fraction", "0.5", "--replay-capacity", "10"], "--replay-capacity 10 is smaller than a batch"),
        (["--replay-fraction", "0.5", "--replay-max-gb", "0.0001"], "over --replay-max-gb 0.0001: lower --replay-capacity to"),
        (["--replay-sampling", "best"], "--replay-sampling"),
        (["--runtime", "ray", "--deterministic"], "--deterministic is not supported with --runtime ray"),
        (["--ray-address", "auto"], "--ray-address is for --runtime ray"),
        (["--eval-video"], "--eval-video records the evaluations of --eval-every: set --eval-every too"),
        (["--eval-every", "10k", "--eval-episodes", "0"], "--eval-episodes is 0: it must be at least 1"),
        (["--eval-every", "often"], "--eval-every: cannot read 'often'"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, expected, tmp_path):
    # Run where a default logdir (runs/<env>-<time>) would land, to see that a refused run makes none.
    proc = subprocess.run(CLI + ["train", *args, "--no-progress"], capture_output=True, text=True, timeout=120, env=ENV, cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("pronghorn: error:") and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert os.listdir(tmp_path) == []


def test_help_and_bad_flags_are_answered_before_torch_is_imported():
    # torch takes about 2 s to import: `--help` and a refused flag should not wait for it.
    code = (
        "import sys\n"
        "from pronghorn.cli import main\n"
        "for argv in (['train', '--num-actors', '0'], ['train', '--help'], ['evaluate'], ['plot'], ['status']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exc:\n"
        "        print(exc.code, 'torch' in sys.modules, file=sys.stderr)\n"
        "import pronghorn\n"
        "print(pronghorn.train.__module__, pronghorn.TrainResult.__name__, 'torch' in sys.modules, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=ENV)
    answers = [line for line in proc.stderr.splitlines() if not line.startswith("pronghorn")]
    assert answers == ["2 False", "0 False", "2 False", "2 False", "2 False"], proc.stderr
    # The package's train and TrainResult are still there, loaded on first use.
    assert proc.stderr.splitlines()[-1] == "pronghorn.training TrainResult True", proc.stderr


def test_help_documents_every_flag():
    proc = subprocess.run(CLI + ["train", "--help"], capture_output=True, text=True, timeout=60, env=ENV)
    assert proc.returncode == 0
    for flag in (
        "--env",
        "--env-backend",
        "--model",
        "--lstm",
        "--num-actors",
        "--envs-per-actor",
        "--unroll-length",
        "--batch-size",
        "--total-frames",
        "--learning-rate",
        "--device",
        "--logdir",
        "--seed",
        "--reward-clipping",
        "--sticky-actions",
        "--episodic-life",
    ):
        assert flag in proc.stdout, flag
    assert "IMPALA" in proc.stdout


def test_lstm_agent_trains_end_to_end_through_time_limits(tmp_path):
    """The LSTM path: core state in slots, resets inside unrolls, truncation values from the core (ShortCartPole truncates every 5 steps)."""
    cfg = pronghorn.Config(
        env="tests.flaky_env:ShortCartPole-v0", lstm=True, total_frames=8_000, logdir=str(tmp_path / "lstm"), progress=False, log_interval=0.5
    )
    result = pronghorn.train(cfg)
    assert result.frames >= 8_000 and result.episodes > 100
    rows = read_csv(tmp_path / "lstm" / "episodes.csv")
    assert {int(r["episode_frames"]) for r in rows} <= {1, 2, 3, 4, 5}
    assert_no_leaks()


def test_a_custom_factory_env_trains_in_spawned_actors(tmp_path):
    proc, out, err = run_cli(
        ["train", "--env", "tests.flaky_env:make_cartpole", "--total-frames", "20k", "--logdir", str(tmp_path / "custom"), "--no-progress"]
    )
    assert proc.returncode == 0 and "frame budget spent after" in out, err[-2000:]
    rows = read_csv(tmp_path / "custom" / "episodes.csv")
    assert rows and rows[0]["level"] == "tests.flaky_env:make_cartpole"
    assert_no_leaks(owners=(proc.pid,))


def test_atari_trains_end_to_end_on_ale_pys_vector_env(tmp_path):
    """The default Atari path: ale-py's vector env in each actor, whole Breakout games in episodes.csv."""
    cfg = pronghorn.Config(env="ALE/Breakout-v5", envs_per_actor=4, batch_size=8, total_frames=16_000, logdir=str(tmp_path / "atari"), progress=False)
    assert cfg.backend == "vector"
    result = pronghorn.train(cfg)
    assert result.frames >= 16_000 and result.learner_steps >= 1
    games = read_csv(tmp_path / "atari" / "episodes.csv")
    # A random policy loses Breakout's 5 lives in a few hundred agent steps: games end, each a whole game of
    # 4-frame steps (life losses end training episodes only).
    assert len(games) >= 4 and all(r["level"] == "ALE/Breakout-v5" for r in games)
    assert all(int(r["episode_frames"]) % 4 == 0 and int(r["episode_frames"]) >= 400 and float(r["episode_return"]) >= 0 for r in games), games
    assert_no_leaks()


def test_compile_learner_trains_end_to_end(tmp_path):
    """--compile-learner from the command line: the compiled update runs in a real run (CartPole, 16 x 20 as in
    test_learner's equivalence test, so torch's on-disk cache usually has it) and the run ends as any other."""
    proc, out, err = run_cli(["train", "--compile-learner", "--total-frames", "30k", "--logdir", str(tmp_path / "compiled"), "--no-progress"])
    assert proc.returncode == 0 and "frame budget spent after" in out, err[-2000:]
    assert "--compile-learner: the learner's second update compiles" in err + out
    rows = read_csv(tmp_path / "compiled" / "metrics.csv")
    assert rows and all(float(r["grad_norm"]) > 0 and float(r["skipped_updates"]) == 0 for r in rows)
    assert_no_leaks(owners=(proc.pid,))
