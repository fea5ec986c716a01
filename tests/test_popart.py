"""PopArt: outputs preserved across statistics updates, normalised targets near N(0, 1) per level, and the
statistics reach the actors and the checkpoint."""

import torch

from pronghorn.config import Config
from pronghorn.learner import Learner
from pronghorn.models import Agent, build_agent
from pronghorn.popart import PopArtHead
from tests.helpers import synthetic_batches


def test_unnormalised_outputs_are_preserved_exactly_when_the_statistics_move():
    torch.manual_seed(0)
    head = PopArtHead(8, 3)
    x, level = torch.randn(64, 8), torch.arange(64) % 3
    before, _ = head(x, level)
    # Targets far from the current statistics (mean 1000, scale 300) move them a lot in one step.
    head.update(1000 + 300 * torch.randn(20, 6), torch.tensor([0, 1, 2, 0, 1, 0]), step=0.5)
    after, normalized = head(x, level)
    assert head.mu.min() > 100  # the statistics did move
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(after, head.sigma()[level] * normalized + head.mu[level])


def test_a_level_absent_from_the_batch_keeps_its_statistics():
    head = PopArtHead(4, 3)
    head.update(torch.full((5, 2), 7.0), torch.tensor([0, 0]), step=0.1)
    assert head.mu[0] > 0 and head.mu[1] == 0 and head.mu[2] == 0 and head.nu[1] == 1


def test_normalised_targets_have_mean_zero_and_unit_std_per_level():
    torch.manual_seed(1)
    head = PopArtHead(4, 3)
    means, scales = torch.tensor([500.0, -3.0, 0.0]), torch.tensor([200.0, 0.5, 1.0])
    level = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    for _ in range(3000):
        targets = means[level] + scales[level] * torch.randn(20, 8)
        head.update(targets, level, step=3e-3)
    targets = means[level] + scales[level] * torch.randn(4000, 8)
    normalized = head.normalize(targets, level)
    for lv in range(3):
        cols = normalized[:, level == lv]
        assert abs(cols.mean().item()) < 0.1 and abs(cols.std().item() - 1) < 0.1, (lv, cols.mean(), cols.std())


def test_learner_with_popart_updates_the_statistics_and_checkpoints_them():
    cfg = Config(levels="CartPole-v1,CartPole-v0", popart=True, total_frames=10_000).for_observations((4,))
    torch.manual_seed(0)
    agent = build_agent(cfg, (4,), 2)
    assert agent.popart is not None and agent.baseline is None
    learner = Learner(cfg, agent, frames_per_step=1)
    for batch in synthetic_batches(5, B=4):
        batch = batch._replace(level=torch.tensor([[0, 1, 0, 1]]))
        metrics = learner.step(batch)
    assert agent.popart.mu.abs().sum() > 0 and "popart_sigma/CartPole-v0" in metrics
    restored = Learner(cfg, build_agent(cfg, (4,), 2), frames_per_step=1)
    restored.load_state_dict(learner.state_dict())
    torch.testing.assert_close(restored.agent.popart.mu, agent.popart.mu)
    torch.testing.assert_close(restored.agent.popart.nu, agent.popart.nu)


def test_the_statistics_travel_to_the_actors_with_the_weights():
    from pronghorn.runtime.shm import WeightStore, new_token

    learner_agent, actor_agent = Agent((4,), 2, popart_levels=2), Agent((4,), 2, popart_levels=2)
    with torch.no_grad():
        learner_agent.popart.mu.copy_(torch.tensor([3.0, -2.0]))
        learner_agent.popart.nu.copy_(torch.tensor([25.0, 8.0]))
    store = WeightStore.create(new_token(), sum(p.numel() for p in learner_agent.parameters()))
    try:
        store.publish(learner_agent, 1)
        store.load_into(actor_agent, timeout=5)
        obs, level = torch.randn(1, 3, 4), torch.tensor([0, 1, 1])
        args = (torch.zeros(1, 3, dtype=torch.int64), torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.bool), actor_agent.initial_state(3))
        torch.testing.assert_close(actor_agent(obs, *args, level=level)[0].baseline, learner_agent(obs, *args, level=level)[0].baseline)
    finally:
        store.release()
