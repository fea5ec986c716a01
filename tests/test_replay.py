"""Replay: the ring, its samplers, staging's exact split, and the learner's use of replayed columns."""

import queue
import time

import numpy as np
import pytest
import torch

from pronghorn import checkpoint
from pronghorn.config import Config, ConfigError
from pronghorn.learner import Learner
from pronghorn.losses import baseline_loss, behaviour_kl
from pronghorn.models import Agent
from pronghorn.records import Unroll, unroll_spec
from pronghorn.replay import ReplayRing, build_ring, column_bytes, unroll_priorities
from pronghorn.staging import Staging
from pronghorn.training import finished_episodes
from tests.helpers import assert_no_leaks, read_csv, run_cli, synthetic_batches


def _columns(values, T=2):
    """A batch-shaped Unroll [T+1, len(values), ...] whose column j is filled with values[j] (as its marker)."""
    spec = unroll_spec(T, len(values), (3,), np.float32, 2, 0)
    fields = [torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype) for shape, dtype in spec]
    for t in fields:
        for j, v in enumerate(values):
            t[:, j] = v
    return Unroll(*fields)


def _marker(batch, j):
    return int(batch.reward[0, j])


def test_overwrite_keeps_the_newest_unrolls():
    ring = ReplayRing(_columns([0]), capacity=5)
    for start in range(0, 12, 3):  # columns 0..11, three at a time: the ring wraps mid-batch
        ring.add(_columns(list(range(start, start + 3))), 0, 3)
    assert ring.size == 5 and ring.inserted == 12
    held = sorted(int(v) for v in ring.data.reward[0])
    assert held == [7, 8, 9, 10, 11]
    for pos in range(5):  # every field of a column moved together, and the stamp names it
        assert torch.all(ring.data.obs[:, pos] == ring.data.reward[0, pos]) and ring.stamp[pos] == int(ring.data.reward[0, pos])


def test_add_takes_only_the_asked_columns():
    ring = ReplayRing(_columns([0]), capacity=8)
    positions, stamps = ring.add(_columns([5, 6, 7, 8]), 1, 2)
    assert positions.tolist() == [0, 1] and stamps.tolist() == [0, 1]
    assert ring.data.reward[0, :2].tolist() == [6, 7] and ring.size == 2


def test_uniform_sampling_passes_a_chi_square_test():
    ring = ReplayRing(_columns([0]), capacity=16, seed=1)
    ring.add(_columns(list(range(10))), 0, 10)  # 10 of 16 held: draws must stay inside what is held
    draws = 20_000
    positions, _, weights = ring.sample(draws)
    counts = torch.bincount(positions, minlength=16).double()
    assert counts[10:].sum() == 0 and torch.all(weights == 1)
    expected = draws / 10
    chi2 = float(((counts[:10] - expected) ** 2 / expected).sum())
    assert chi2 < 27.88, chi2  # chi-square, 9 degrees of freedom, p = 0.001


def test_prioritized_sampling_follows_priorities_and_weights_match_a_hand_computation():
    ring = ReplayRing(_columns([0]), capacity=4, sampling="prioritized", priority_exponent=1.0, is_exponent=0.5, seed=2)
    positions, stamps = ring.add(_columns([0, 1, 2, 3]), 0, 4)
    ring.update_priorities(positions, stamps, torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert torch.allclose(ring.probabilities(), torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64))
    drawn, _, weights = ring.sample(40_000)
    freq = torch.bincount(drawn, minlength=4).double() / 40_000
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64), atol=0.01), freq
    # w_i = (N P_i)^-beta / max_j w_j = sqrt(P_0 / P_i) when column 0 (the least likely) is in the draw.
    by_column = {int(p): float(w) for p, w in zip(drawn, weights)}
    assert by_column[0] == pytest.approx(1.0)
    assert by_column[1] == pytest.approx(0.5**0.5, rel=1e-6)
    assert by_column[2] == pytest.approx((1 / 3) ** 0.5, rel=1e-6)
    assert by_column[3] == pytest.approx(0.5, rel=1e-6)


def test_exponent_zero_is_uniform_and_new_columns_get_the_largest_priority():
    ring = ReplayRing(_columns([0]), capacity=4, sampling="prioritized", priority_exponent=0.0)
    positions, stamps = ring.add(_columns([0, 1]), 0, 2)
    ring.update_priorities(positions, stamps, torch.tensor([0.5, 9.0]))
    assert torch.allclose(ring.probabilities(), torch.tensor([0.5, 0.5], dtype=torch.float64))
    ring.add(_columns([2]), 0, 1)
    assert ring.priority[2] == 9.0  # sampled soon, before its own error is known


def test_a_priority_for_an_overwritten_column_does_not_land_on_its_successor():
    ring = ReplayRing(_columns([0]), capacity=2, sampling="prioritized")
    positions, stamps = ring.add(_columns([0, 1]), 0, 2)
    ring.add(_columns([2]), 0, 1)  # overwrites position 0
    applied = ring.update_priorities(positions, stamps, torch.tensor([50.0, 60.0]))
    assert applied == 1 and ring.priority[0] == 1.0 and ring.priority[1] == 60.0


def test_unroll_priority_mixes_max_and_mean():
    adv = torch.tensor([[1.0, 0.0], [3.0, 0.0], [2.0, 4.0]])  # [T=3, B=2]
    assert unroll_priorities(adv, 0.0).tolist() == [2.0, pytest.approx(4 / 3)]
    assert unroll_priorities(adv, 0.9).tolist() == [pytest.approx(0.9 * 3 + 0.1 * 2), pytest.approx(0.9 * 4 + 0.1 * 4 / 3)]


def _numbered_slots(n, T=2, E=2):
    spec = unroll_spec(T, E, (3,), np.float32, 2, 0)
    return [Unroll(*(torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype) for shape, dtype in spec)) for _ in range(n)]


class _Producer:
    """Stands in for the actors: refills each handed-back slot with a new unroll number (its marker)."""

    def __init__(self, slots):
        self.slots, self.full, self.made = slots, queue.Queue(), 0
        for i in range(len(slots)):
            self.put(i)

    def put(self, i):
        self.made += 1
        for t in self.slots[i]:
            t.fill_(self.made)
        self.full.put(i)


def test_staging_splits_every_batch_exactly_and_copies_never_alias_the_ring_or_the_slots():
    # A tiny ring (wraps every other batch) and a slow learner that holds each batch while the next is staged.
    slots = _numbered_slots(6)
    producer = _Producer(slots)
    ring = ReplayRing(Unroll(*(t[:, :1] for t in slots[0])), capacity=8, seed=0)
    staging = Staging(
        slots,
        producer.full,
        producer,
        batch_slots=4,
        device=torch.device("cpu"),
        timeout=5,
        health_check=lambda: None,
        describe_producers=lambda: "test",
        replay=ring,
        replay_columns=4,
    )
    stored = set()
    try:
        for n in range(12):
            staged = staging.next()
            batch = staged.data
            markers = [_marker(batch, j) for j in range(8)]
            if n == 0:
                assert staged.fresh == 8  # the ring is empty: all fresh
            else:
                assert staged.fresh == 4  # exact: 4 fresh + 4 replayed, in every batch
                assert all(m in stored for m in markers[4:])  # replayed columns are earlier fresh ones...
                assert not set(markers[4:]) & set(markers[:4])  # ...never this batch's own
            stored.update(markers[: staged.fresh])
            ring_span = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in ring.data]
            slot_span = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for s in slots for t in s]
            for t in batch:
                lo, hi = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
                assert all(hi <= a or lo >= b for a, b in ring_span + slot_span)
            before = batch.obs.clone()
            time.sleep(0.05)  # the next batch is staged (and the ring overwritten) while this one is in use
            assert torch.equal(batch.obs, before)
    finally:
        staging.close()


def test_finished_episodes_skip_replayed_columns():
    batch = _columns([1, 2, 3, 4])
    batch.episode_end.zero_()
    batch.episode_end[2] = True  # every column ends a game at row 2
    batch.level.zero_()
    assert len(finished_episodes(batch, 0, ("x",), 0.0)) == 4
    assert len(finished_episodes(batch, 0, ("x",), 0.0, fresh=1)) == 1


def test_finished_episodes_read_each_game_in_time_then_column_order():
    batch = _columns([0, 1, 2, 3], T=3)
    batch.episode_end.zero_()
    batch.level.copy_(torch.tensor([1, 0, 1, 0]))
    ends = [(0, 2), (1, 3), (1, 0), (3, 0), (3, 2)]  # (t, b); row 0 repeats the last unroll's row: not counted
    for t, b in ends:
        batch.episode_end[t, b] = True
        batch.episode_return[t, b] = 10 * t + b
        batch.episode_frames[t, b] = 100 * t + b
    games = finished_episodes(batch, 7, ("a", "b"), 1.5)
    assert [(g.episode_return, g.episode_frames, g.level) for g in games] == [(10.0, 100, "b"), (13.0, 103, "a"), (30.0, 300, "b"), (32.0, 302, "b")]
    assert all(g.frames == 7 and g.wall_time == 1.5 for g in games)
    # Only the fresh columns [0, 3): column 3's game is left out, the others keep their order.
    assert [g.episode_return for g in finished_episodes(batch, 7, ("a", "b"), 1.5, fresh=3)] == [10.0, 30.0, 32.0]


def _learner(**kw):
    torch.manual_seed(0)
    cfg = Config(total_frames=10_000, batch_size=8, envs_per_actor=4, **kw).for_observations((4,))
    return Learner(cfg, Agent((4,), 2), frames_per_step=1)


def test_only_fresh_columns_count_as_frames_and_policy_lag():
    learner = _learner(replay_fraction=0.5)
    (batch,) = synthetic_batches(1, T=5, B=8)
    batch.policy_version[:] = 0
    batch.policy_version[:, 4:] = -50  # replayed columns acted 50 updates earlier
    learner.steps = 3
    metrics = learner.step(batch, fresh=4)
    assert learner.frames == 5 * 4
    assert metrics["policy_lag_max"] == 3 and metrics["replay_age_mean"] == 53 and metrics["replay_columns"] == 4


def test_a_second_pass_over_a_batch_updates_but_counts_no_frames():
    learner = _learner(updates_per_batch=2)
    (batch,) = synthetic_batches(1, T=5, B=8)
    learner.step(batch)
    before = [p.clone() for p in learner.agent.parameters()]
    learner.step(batch, count=False)
    assert learner.frames == 5 * 8 and learner.steps == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.agent.parameters()))


def test_the_trust_region_masks_far_replayed_columns_and_never_fresh_ones():
    learner = _learner(replay_fraction=0.5, replay_kl_limit=0.1)
    (batch,) = synthetic_batches(1, T=5, B=8)
    with torch.no_grad():
        current, _ = learner.agent(batch.obs, batch.last_action, batch.reward, batch.terminated, batch.core_state)
    batch = batch._replace(policy_logits=current.policy_logits.clone())
    batch.policy_logits[:, 0, 0] += 20.0  # a fresh column far off: not masked
    batch.policy_logits[:, 6, 1] += 20.0  # one of four replayed columns far off: masked
    metrics = learner.step(batch, fresh=4)
    assert metrics["replay_masked_fraction"] == pytest.approx(0.25)


def test_kl_and_weighted_baseline_loss_by_hand():
    mu = torch.log(torch.tensor([[[0.5, 0.5]]]))
    pi = torch.log(torch.tensor([[[0.25, 0.75]]]))
    assert behaviour_kl(mu, pi).item() == pytest.approx(0.5 * np.log(0.5 / 0.25) + 0.5 * np.log(0.5 / 0.75))
    targets, values = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 0.0]])
    assert baseline_loss(targets, values, torch.tensor([1.0, 0.5])).item() == pytest.approx(0.5 * (1 + 0.5 * 4))


def test_importance_weights_scale_each_column_of_the_loss():
    # Zero weight on a column must remove it from the update: the gradient equals that of the batch without it.
    # (The entropy bonus is a regulariser, not an estimate from the sample: it is not weighted, so it is off here.)
    (batch,) = synthetic_batches(1, T=5, B=8)
    a = _learner(replay_fraction=0.5, entropy_cost=0.0)
    b = _learner(replay_fraction=0.5, entropy_cost=0.0)
    weights = torch.ones(8)
    weights[7] = 0.0
    a.step(batch, fresh=4, weights=weights)
    trimmed = Unroll(*(t[:, :7] for t in batch))
    b.step(trimmed, fresh=4)
    for pa, pb in zip(a.agent.parameters(), b.agent.parameters()):
        assert torch.allclose(pa, pb, atol=1e-6)


def test_bad_replay_settings_are_refused_naming_the_flag():
    def refused(**kw):
        with pytest.raises(ConfigError) as info:
            Config(**kw).for_observations((4,))._check_replay()
        return str(info.value)

    assert refused(replay_fraction=1.0).startswith("--replay-fraction is 1.0")
    assert "use one of 0.5" in refused(replay_fraction=0.3)  # 16 x 0.3 = 5 replayed, 11 fresh: not whole actor unrolls of 8
    assert refused(replay_fraction=0.5, replay_capacity=8).startswith("--replay-capacity 8 is smaller than a batch (16 unrolls)")
    assert refused(replay_kl_limit=0.0).startswith("--replay-kl-limit is 0.0")
    assert refused(replay_sampling="prioritized", replay_is_exponent=2.0).startswith("--replay-is-exponent is 2.0")


def test_a_ring_over_the_memory_limit_is_refused_with_the_numbers():
    cfg = Config(replay_fraction=0.5, replay_capacity=100_000, replay_max_gb=0.01).for_observations((4, 84, 84))
    with pytest.raises(
        ConfigError, match=r"^--replay-capacity 100,000 unrolls of [\d,]+ bytes need [\d.]+ GiB, over --replay-max-gb 0.01: lower --replay-capacity to [\d,]+"
    ):
        build_ring(cfg, (4, 84, 84), np.dtype(np.uint8), 6, 0)
    ring = build_ring(Config(replay_fraction=0.5).for_observations((4,)), (4,), np.dtype(np.float32), 2, 0)
    assert ring is not None and ring.capacity == 4096 and ring.nbytes >= 4096 * column_bytes(Unroll(*(t[:, :1] for t in ring.data)))
    assert build_ring(Config().for_observations((4,)), (4,), np.dtype(np.float32), 2, 0) is None  # fraction 0 allocates nothing


def test_a_replay_run_counts_only_fresh_frames_and_episodes(tmp_path):
    logdir = tmp_path / "replay"
    proc, _out, err = run_cli(
        [
            "train",
            "--logdir",
            str(logdir),
            "--no-progress",
            "--total-frames",
            "60k",
            "--batch-size",
            "32",
            "--replay-fraction",
            "0.5",
            "--replay-sampling",
            "prioritized",
            "--replay-kl-limit",
            "0.5",
            "--lstm",
            "--log-interval",
            "0.5",
        ]
    )
    assert proc.returncode == 0, err[-3000:]
    assert "replay: 16 of every 32 unrolls from a ring of 4,096 unrolls" in err
    rows = read_csv(logdir / "metrics.csv")
    last = rows[-1]
    assert float(last["replay_columns"]) == 16 and float(last["replay_age_max"]) >= float(last["replay_age_mean"]) > 0
    assert 0 <= float(last["replay_masked_fraction"]) <= 1
    frames = int(last["frames"])
    assert 60_000 <= frames < 60_000 + 32 * 20  # each update adds only its 16 fresh unrolls of 20 steps
    # Replayed columns hold games already counted when they were fresh: counted again, the episodes' lengths
    # would add up to about twice the frames trained.
    lengths = sum(int(r["episode_frames"]) for r in read_csv(logdir / "episodes.csv"))
    assert 0.8 * frames < lengths <= frames
    assert_no_leaks(owners=(proc.pid,))


def test_checkpoint_replay_restores_the_ring_and_a_plain_resume_refills_it(tmp_path):
    logdir = tmp_path / "resume"
    common = ["train", "--logdir", str(logdir), "--no-progress", "--batch-size", "32", "--replay-fraction", "0.5", "--stop-at-return", "1e9"]
    proc, _, err = run_cli(common + ["--total-frames", "40k", "--checkpoint-replay"])
    assert proc.returncode == 0 and "--checkpoint-replay: every checkpoint holds the ring" in err, err[-3000:]
    _, state = checkpoint.load_latest(str(logdir))
    held = state["replay"]["size"]
    assert held > 0 and state["replay"]["inserted"] >= held
    proc, _, err = run_cli(common + ["--total-frames", "60k", "--checkpoint-replay"])
    assert proc.returncode == 0 and f"replay ring restored: {held:,} unrolls" in err, err[-3000:]
    _, state = checkpoint.load_latest(str(logdir))
    assert int(state["learner"]["frames"]) >= 60_000 and state["replay"]["inserted"] > held
    proc, _, err = run_cli(common + ["--total-frames", "80k"])  # without the flag: resumes, and the ring starts empty
    assert proc.returncode == 0 and "replay ring restored" not in err and "resumed from" in err, err[-3000:]
    _, state = checkpoint.load_latest(str(logdir))
    assert "replay" not in state and int(state["learner"]["frames"]) >= 80_000
    assert_no_leaks(owners=(proc.pid,))
