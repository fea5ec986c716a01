"""--deterministic: two runs with the same seed give the same episodes and the same weights."""

import csv
import hashlib

import pytest
import torch

from pronghorn import checkpoint
from tests.helpers import assert_no_leaks, run_cli


def _run(logdir, extra=()):
    proc, _out, err = run_cli(
        [
            "train",
            "--deterministic",
            "--seed",
            "3",
            "--envs-per-actor",
            "8",
            "--total-frames",
            "40k",
            "--stop-at-return",
            "1e9",
            "--logdir",
            str(logdir),
            "--no-progress",
            *extra,
        ]
    )
    assert proc.returncode == 0, err[-2000:]
    assert_no_leaks(owners=(proc.pid,))
    with open(logdir / "episodes.csv", newline="") as f:
        episodes = [{k: v for k, v in row.items() if k != "wall_time"} for row in csv.DictReader(f)]
    _, state = checkpoint.load_latest(str(logdir))
    digest = hashlib.sha256()
    for name, tensor in sorted(state["learner"]["agent"].items()):
        digest.update(name.encode())
        digest.update(tensor.numpy().tobytes())
    return episodes, digest.hexdigest(), state


# With prioritized replay the draws depend on priorities the learner reports one batch late: still identical.
@pytest.mark.parametrize("extra", [(), ("--batch-size", "32", "--replay-fraction", "0.5", "--replay-sampling", "prioritized")], ids=["plain", "replay"])
def test_two_runs_with_one_seed_are_identical(tmp_path, extra):
    episodes_a, weights_a, state = _run(tmp_path / "a", extra)
    episodes_b, weights_b, _ = _run(tmp_path / "b", extra)
    assert len(episodes_a) > 50
    assert episodes_a == episodes_b
    assert weights_a == weights_b
    assert state["learner"]["steps"] > 100
    assert all(torch.isfinite(t).all() for t in state["learner"]["agent"].values())
