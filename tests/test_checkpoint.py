"""Checkpoints: atomic files, exact state round trip, resume after SIGKILL, corrupt files, bad configs."""

import glob
import json
import os
import signal
import subprocess
import time

import pytest
import torch

from pronghorn import checkpoint
from pronghorn.config import Config
from pronghorn.learner import Learner
from pronghorn.logs import trim_csv
from pronghorn.models import Agent
from tests.helpers import ENV, assert_no_leaks, read_csv, start_training, synthetic_batches, train_command, wait_for_file


def _learner(cfg):
    torch.manual_seed(0)
    return Learner(cfg, Agent((4,), 2), frames_per_step=1)


def test_resumed_learner_matches_one_run_straight_through(tmp_path):
    torch.set_num_threads(1)
    cfg = Config(total_frames=400, lr_decay_frames=400).for_observations((4,))
    batches = synthetic_batches(6)
    straight = _learner(cfg)
    for b in batches:
        straight.step(b)

    first = _learner(cfg)
    for b in batches[:3]:
        first.step(b)
    lr_at_boundary = first.learning_rate()
    path = checkpoint.save(str(tmp_path), {"config": {}, "learner": first.state_dict(), "rng": {}, "stats": {}}, first.frames)
    resumed = Learner(cfg, Agent((4,), 2), frames_per_step=1)  # fresh weights, fresh optimizer
    resumed.load_state_dict(checkpoint.load(path)["learner"])
    assert resumed.steps == 3 and resumed.frames == first.frames
    assert resumed.learning_rate() == lr_at_boundary < cfg.learning_rate  # the schedule continues, it does not restart
    for b in batches[3:]:
        resumed.step(b)

    assert resumed.steps == straight.steps and resumed.frames == straight.frames
    for a, b in zip(straight.agent.parameters(), resumed.agent.parameters()):
        assert torch.equal(a, b)
    sa, sb = straight.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    for key in sa:
        for name in sa[key]:
            assert torch.equal(torch.as_tensor(sa[key][name]), torch.as_tensor(sb[key][name])), (key, name)


def test_a_kill_between_the_checkpoint_and_latest_still_resumes_from_the_newest(tmp_path):
    checkpoint.save(str(tmp_path), {"config": {}, "learner": {"frames": 10}, "rng": {}, "stats": {}}, 10)
    checkpoint.save(str(tmp_path), {"config": {}, "learner": {"frames": 20}, "rng": {}, "stats": {}}, 20)
    (tmp_path / "checkpoints" / "latest").write_text("ckpt-000000000010.pt")  # as if killed before `latest` moved on
    path, state = checkpoint.load_latest(str(tmp_path))
    assert path.endswith("ckpt-000000000020.pt") and state["learner"]["frames"] == 20


def test_save_keeps_the_last_k_and_latest_names_the_newest(tmp_path):
    for frames in (10, 20, 30, 40):
        checkpoint.save(str(tmp_path), {"config": {}, "learner": {"frames": frames}, "rng": {}, "stats": {}}, frames, keep=3)
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert names == ["ckpt-000000000020.pt", "ckpt-000000000030.pt", "ckpt-000000000040.pt", "latest"]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "ckpt-000000000040.pt"
    assert not glob.glob(str(tmp_path / "checkpoints" / "*.tmp-*"))


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
    for frames in (10, 20):
        checkpoint.save(str(tmp_path), {"config": {}, "learner": {"frames": frames}, "rng": {}, "stats": {}}, frames)
    newest = tmp_path / "checkpoints" / "ckpt-000000000020.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    with caplog.at_level("WARNING"):
        path, state = checkpoint.load_latest(str(tmp_path))
    assert path.endswith("ckpt-000000000010.pt") and state["learner"]["frames"] == 10
    assert "ckpt-000000000020.pt" in caplog.text


def test_a_resumed_csv_keeps_its_header_whatever_the_first_new_row_holds(tmp_path):
    from pronghorn.logs import _CSV

    path = tmp_path / "metrics.csv"
    first = _CSV(str(path))
    first.write({"frames": 10, "a": 1, "b": 2})
    first.close()
    resumed = _CSV(str(path))  # as after a restart: the new run's first row lacks "a" and adds "c"
    resumed.write({"b": 4, "frames": 20, "c": 9})
    resumed.close()
    assert read_csv(path) == [{"frames": "10", "a": "1", "b": "2"}, {"frames": "20", "a": "", "b": "4"}]


def test_trim_csv_drops_rows_past_the_checkpoint_and_half_written_ones(tmp_path):
    path = tmp_path / "episodes.csv"
    path.write_text("frames,level,episode_return\n10,a,1.0\n20,a,2.0\n30,a,3.0\n40,a")
    assert trim_csv(str(path), 25) == 2
    assert path.read_text().splitlines() == ["frames,level,episode_return", "10,a,1.0", "20,a,2.0"]


def _train(logdir, *flags, timeout=300):
    return subprocess.run(train_command(logdir, *flags), capture_output=True, text=True, timeout=timeout, env=ENV)


def test_sigkill_of_the_whole_group_then_the_same_command_resumes_and_reaches_the_target(tmp_path):
    logdir = tmp_path / "killed"
    # With an evaluation process too: it is killed with the group and started again on resume.
    command = train_command(logdir, "--checkpoint-secs", "1", "--eval-every", "10k", "--eval-episodes", "1")
    semaphores = set(glob.glob("/dev/shm/sem.mp-*"))  # multiprocessing's named semaphores: a SIGKILL of the group leaves any it held
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            ckpts = glob.glob(str(logdir / "checkpoints" / "ckpt-*.pt"))
            if ckpts and max(int(p[-15:-3]) for p in ckpts) >= 20_000:
                break
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert set(glob.glob("/dev/shm/sem.mp-*")) <= semaphores  # the runtime and the evaluator hold none (their pipes need no locks)
    path, state = checkpoint.load_latest(str(logdir))
    killed_at = state["learner"]["frames"]
    assert killed_at >= 20_000
    with open(logdir / "episodes.csv", newline="") as f:  # as the crash left it (maybe a half row at the end)
        import csv

        covered = [r for r in csv.DictReader(f) if None not in r.values() and int(r["frames"]) <= killed_at]

    again = subprocess.run(command, capture_output=True, text=True, timeout=300, env=ENV)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {path}" in again.stdout and "solved" in again.stdout
    metrics = read_csv(logdir / "metrics.csv")
    frames = [int(r["frames"]) for r in metrics]
    assert frames == sorted(frames) and frames[-1] > killed_at
    assert any(int(r["frames"]) <= killed_at for r in metrics) and any(int(r["frames"]) > killed_at for r in metrics)
    steps = [int(r["learner_steps"]) for r in metrics]
    assert steps == sorted(steps)  # learner steps continue from the checkpoint, not from 0
    episodes = read_csv(logdir / "episodes.csv")
    assert all(None not in r.values() and len(r) == 5 for r in episodes)
    # Nothing the checkpoint covers is lost or repeated; everything after it is new.
    assert episodes[: len(covered)] == covered
    assert all(int(r["frames"]) > killed_at for r in episodes[len(covered) :])
    assert [int(r["frames"]) for r in episodes] == sorted(int(r["frames"]) for r in episodes)
    last = [float(r["episode_return"]) for r in episodes[-100:]]
    assert sum(last) / len(last) >= 475
    # TensorBoard: events the killed run wrote past the checkpoint are purged, so the timeline is one line.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = [e.step for e in EventAccumulator(str(logdir)).Reload().Scalars("learner/learning_rate")]
    assert steps == sorted(set(steps)) and steps[-1] > killed_at
    assert_no_leaks()


@pytest.mark.serial  # a wall-clock bound
def test_sigterm_checkpoints_and_exits_within_10_seconds(tmp_path):
    logdir = tmp_path / "terminated"
    proc = start_training(logdir, "--total-frames", "100M", "--stop-at-return", "1e9")
    try:
        wait_for_file(logdir / "metrics.csv", proc)
        time.sleep(1.0)
        assert not glob.glob(str(logdir / "checkpoints" / "ckpt-*.pt"))  # none yet: --checkpoint-secs is 600
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # to the learner only, as a scheduler or `kill` would
        while not glob.glob(str(logdir / "checkpoints" / "ckpt-*.pt")) and time.monotonic() - sent < 10:
            time.sleep(0.05)
        took = time.monotonic() - sent
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 10, f"no checkpoint within 10 s of SIGTERM ({took:.1f} s)"
    assert proc.returncode == 130 and "interrupted after" in out, err[-2000:]
    path, state = checkpoint.load_latest(str(logdir))
    assert path is not None and state["learner"]["frames"] > 0
    assert_no_leaks(owners=(proc.pid,))


def test_raising_the_budget_resumes_and_the_lr_schedule_continues(tmp_path):
    logdir = tmp_path / "budget"
    first = _train(logdir, "--total-frames", "30k", "--lr-decay-frames", "60k", "--stop-at-return", "1e9")
    assert first.returncode == 0, first.stderr[-2000:]
    first_end = max(int(r["frames"]) for r in read_csv(logdir / "metrics.csv"))  # the budget ends at a batch boundary past 30k
    second = _train(logdir, "--total-frames", "60k", "--lr-decay-frames", "60k", "--stop-at-return", "1e9")
    assert second.returncode == 0 and "resumed from" in second.stdout, second.stderr[-2000:]
    first_line = next(line for line in second.stderr.splitlines() if "return(last" in line)
    assert "return(last 100)" in first_line, first_line  # the console's recent returns came back with the checkpoint
    metrics = read_csv(logdir / "metrics.csv")
    after = [r for r in metrics if int(r["frames"]) > first_end]
    assert after and int(after[0]["learner_steps"]) > 90  # ~94 steps were done before the restart
    # lr = 3e-3 * (1 - frames / 60k) (--lr-decay-frames, not the budget): continuing from 30k frames it starts near 1.5e-3, not at 3e-3.
    assert float(after[0]["learning_rate"]) < 1.6e-3
    assert json.loads((logdir / "config.json").read_text())["total_frames"] == 60_000


def test_incompatible_flags_and_checkpoints_are_refused_with_exit_2(tmp_path):
    logdir = tmp_path / "compat"
    assert _train(logdir, "--total-frames", "10k").returncode == 0
    proc = _train(logdir, "--total-frames", "20k", "--hidden-size", "32")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "--hidden-size is 32 here but 64 in the run" in lines[0] and "--restart" in lines[0]
    # A checkpoint that no longer fits the agent (config.json edited by hand) is refused too.
    path, state = checkpoint.load_latest(str(logdir))
    state["config"]["hidden_size"] = 32
    torch.save(state, path)
    proc = _train(logdir, "--total-frames", "20k", "--hidden-size", "32")
    assert proc.returncode == 2 and "does not fit this agent" in proc.stderr.strip().splitlines()[-1]


def test_restart_moves_the_old_run_aside(tmp_path):
    logdir = tmp_path / "again"
    assert _train(logdir, "--total-frames", "10k").returncode == 0
    proc = _train(logdir, "--total-frames", "10k", "--restart")
    assert proc.returncode == 0 and "resumed" not in proc.stdout
    previous = glob.glob(str(logdir / "previous-*"))
    assert len(previous) == 1 and os.path.exists(os.path.join(previous[0], "episodes.csv"))
    assert glob.glob(os.path.join(previous[0], "checkpoints", "ckpt-*.pt"))


def test_runs_started_in_the_same_second_each_get_their_own_logdir(tmp_path):
    # Without --logdir the name is runs/<env>-<time to the second>: a second run must not reopen the first's.
    import threading

    from pronghorn.rundir import new_run_dir

    base, barrier, made = str(tmp_path / "CartPole-v1-20261204-061613"), threading.Barrier(8), []

    def start() -> None:
        barrier.wait()
        made.append(new_run_dir(base))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(made) == sorted([base] + [f"{base}-{n}" for n in range(2, 9)])
    assert all(os.listdir(path) == [] for path in made)


def test_a_failed_write_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    import errno

    checkpoint.save(str(tmp_path), {"config": {}, "learner": {"frames": 10}, "rng": {}, "stats": {}}, 10)

    def disk_full(obj, f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(checkpoint.CheckpointError, match=r"No space left on device\); the previous one \(.*ckpt-000000000010.pt\) is intact"):
        checkpoint.save(str(tmp_path), {"config": {}, "learner": {"frames": 20}, "rng": {}, "stats": {}}, 20)
    monkeypatch.undo()
    path, state = checkpoint.load_latest(str(tmp_path))
    assert path.endswith("ckpt-000000000010.pt") and state["learner"]["frames"] == 10
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["ckpt-000000000010.pt", "latest"]  # no partial file left


def test_removing_the_logdir_mid_run_stops_with_a_clear_error(tmp_path):
    import shutil

    logdir = tmp_path / "doomed"
    proc = start_training(logdir, "--checkpoint-secs", "1", "--total-frames", "100M", "--stop-at-return", "1e9")
    try:
        wait_for_file(logdir / "metrics.csv", proc)
        # The run keeps creating files (episodes.csv, checkpoint temporaries) while rmtree walks the folder,
        # so one pass can fail with "Directory not empty"; repeat as `rm -rf` would have to.
        deadline = time.monotonic() + 60
        while logdir.exists() and time.monotonic() < deadline:
            shutil.rmtree(logdir, ignore_errors=True)
        assert not logdir.exists(), "could not remove the logdir"
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    last = err.strip().splitlines()[-1]
    # Depending on where the removal meets the run (rmtree deletes the files before the folder), the one
    # line says the logdir was removed or names the checkpoint folder that could not be written.
    assert proc.returncode == 1 and last.startswith("pronghorn: error: training stopped: "), err[-2000:]
    assert "Traceback" not in err, err[-2000:]  # TensorBoard's writer thread fails too: quietly, the line above says it
    assert "was removed while training" in last or ("could not write" in last and "No such file or directory" in last), last
    assert_no_leaks(owners=(proc.pid,))


def test_a_log_write_that_fails_at_a_checkpoint_stops_the_run_after_the_checkpoint_is_written(tmp_path, monkeypatch):
    """The games wait in the logger and reach episodes.csv when a checkpoint is written; if that write fails
    (disk full), the checkpoint is written all the same and the run stops with the log's error, rather than
    going on without the games (only the first write fails here, as a disk that filled for a moment)."""
    import errno

    import pronghorn.logs as logs
    from pronghorn import Config, train

    monkeypatch.setattr(logs, "_EPISODES_EVERY_S", 1e9)  # games reach the sinks only at a flush: here the checkpoint's
    write = logs.CSVSink.episodes
    failures = []

    def fails_once(self, episodes):
        if not failures:
            failures.append(len(episodes))
            raise OSError(errno.ENOSPC, "No space left on device")
        write(self, episodes)

    monkeypatch.setattr(logs.CSVSink, "episodes", fails_once)
    logdir = tmp_path / "full"
    cfg = Config(env="CartPole-v1", total_frames=2_000_000, stop_at_return=1e9, checkpoint_secs=1, log_interval=1e6, logdir=str(logdir), progress=False)
    with pytest.raises(logs.LogWriteError, match="No space left on device"):
        train(cfg)
    assert failures and failures[0] > 0  # the write that failed held games
    _, state = checkpoint.load_latest(str(logdir))
    assert 0 < state["learner"]["frames"] < 2_000_000  # stopped at the first checkpoint's failed log write, not at the budget
    assert_no_leaks()
