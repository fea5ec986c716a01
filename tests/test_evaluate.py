"""evaluate, plot and status on a real trained CartPole run (trained once for this module)."""

import json
import subprocess

import imageio.v2 as imageio
import pytest

import pronghorn
from pronghorn.plot import plot_runs, read_reference
from tests.helpers import CLI, ENV, assert_no_leaks


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("trained") / "cartpole"
    # The full 500k-frame budget (learning rate annealed to 0), not an early stop at the first mean of 475:
    # a policy that has just crossed 475 while sampling once scored 429.8 greedily; trained through, four
    # seeds scored 500.0 greedily in 10 of 10 games each.
    result = pronghorn.train(pronghorn.Config(logdir=str(logdir), progress=False, stop_at_return=1e9))
    assert result.mean_return >= 450, result
    assert_no_leaks()
    return logdir


def test_evaluate_greedy_solves_cartpole_and_writes_a_readable_mp4(trained, tmp_path):
    video = tmp_path / "eval.mp4"
    proc = subprocess.run(
        CLI + ["evaluate", "--logdir", str(trained), "--episodes", "10", "--greedy", "--video", str(video)],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    stats = summary["levels"]["CartPole-v1"]
    assert stats["episodes"] == 10 and stats["return"]["mean"] >= 450
    assert set(stats["return"]) == {"mean", "std", "min", "max"} and set(stats["length_frames"]) == {"mean", "std", "min", "max"}
    assert summary["frames"] > 0 and summary["checkpoint"].endswith(".pt") and summary["greedy"] is True
    reader = imageio.get_reader(str(video))
    frames = [f for f in reader]
    assert reader.get_meta_data()["codec"] == "h264"
    assert len(frames) >= 100 and frames[0].ndim == 3 and frames[0].shape[2] == 3


def test_evaluate_rejects_a_folder_without_a_run(tmp_path):
    proc = subprocess.run(CLI + ["evaluate", "--logdir", str(tmp_path)], capture_output=True, text=True, timeout=120, env=ENV)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "no config.json" in lines[0]


def test_plot_of_a_run_with_no_finished_game_says_so_and_a_run_s_curve_says_why_it_is_missing(tmp_path):
    """A run folder holds config.json from the start and episodes.csv from the first game's end: before that,
    plot names that as the reason (exit 2, one line), and the curve a run writes at its end says why it is not there."""
    from pronghorn.plot import write_curve

    (tmp_path / "config.json").write_text("{}")
    proc = subprocess.run(CLI + ["plot", str(tmp_path), "-o", str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120, env=ENV)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "no game has finished" in lines[0], proc.stderr
    assert write_curve(str(tmp_path)) == f"not written (no game has finished in {str(tmp_path)!r} yet, so it has no episodes.csv to plot)"
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(CLI + ["plot", str(empty), "-o", str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 2 and "a pronghorn run folder" in proc.stderr and "Traceback" not in proc.stderr


def test_plot_writes_a_png_of_the_expected_size_with_groups(trained, tmp_path):
    out = plot_runs([str(trained)], str(tmp_path / "one.png"), size=(6, 4), dpi=100)
    assert imageio.imread(out).shape[:2] == (400, 600)
    # Two runs with the same folder name become one mean line with a band.
    out = subprocess.run(
        CLI + ["plot", str(trained), str(trained), "-o", str(tmp_path / "two.png"), "--x", "wall"], capture_output=True, text=True, timeout=120, env=ENV
    )
    assert out.returncode == 0, out.stderr
    assert imageio.imread(tmp_path / "two.png").shape[:2] == (400, 600)


def test_plot_draws_published_curves_beside_the_runs_and_refuses_bad_ones(trained, tmp_path):
    reference = tmp_path / "published.csv"
    # Out of order on purpose, one point past the run's frames (not drawn), one level the run does not have.
    reference.write_text(
        "level,label,frames,return\nCartPole-v1,paper,200000,300\nCartPole-v1,paper,100000,100\nCartPole-v1,paper,900000000,500\nOther-v0,x,1,1\n"
    )
    assert read_reference(str(reference))["CartPole-v1"] == {"paper": [(100000.0, 100.0), (200000.0, 300.0), (900000000.0, 500.0)]}
    plain = imageio.imread(plot_runs([str(trained)], str(tmp_path / "plain.png")))
    proc = subprocess.run(
        CLI + ["plot", str(trained), "-o", str(tmp_path / "ref.png"), "--reference", str(reference)], capture_output=True, text=True, timeout=120, env=ENV
    )
    assert proc.returncode == 0, proc.stderr
    with_reference = imageio.imread(tmp_path / "ref.png")
    assert with_reference.shape == plain.shape and (with_reference != plain).any()
    # Points past the run's frames and levels the runs do not have are left out: the same picture as a file
    # holding only the two points inside the run's span.
    inside = tmp_path / "inside.csv"
    inside.write_text("level,label,frames,return\nCartPole-v1,paper,100000,100\nCartPole-v1,paper,200000,300\n")
    assert (imageio.imread(plot_runs([str(trained)], str(tmp_path / "inside.png"), reference=str(inside))) == with_reference).all()
    bad = tmp_path / "bad.csv"
    bad.write_text("level,frames,return\nCartPole-v1,1,2\n")
    for extra, words in (
        (["--reference", str(bad)], "lacks the column(s) label"),
        (["--reference", str(tmp_path / "missing.csv")], "does not exist"),
        (["--reference", str(reference), "--x", "wall"], "published curves are given in frames"),
    ):
        proc = subprocess.run(CLI + ["plot", str(trained), "-o", str(tmp_path / "x.png"), *extra], capture_output=True, text=True, timeout=120, env=ENV)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr


def test_status_reports_frames_checkpoint_and_returns(trained):
    proc = subprocess.run(CLI + ["status", str(trained)], capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "frames " in proc.stdout and "ckpt-" in proc.stdout and "CartPole-v1: mean of last 100" in proc.stdout
