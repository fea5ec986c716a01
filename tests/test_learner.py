import copy

import torch

from pronghorn.config import Config
from pronghorn.learner import Learner
from pronghorn.models import Agent
from tests.helpers import synthetic_batches


def test_a_non_finite_update_is_skipped_and_leaves_weights_and_optimizer_untouched():
    torch.manual_seed(0)
    learner = Learner(Config(total_frames=10_000).for_observations(image=False), Agent((4,), 2), frames_per_step=1)
    good, bad = synthetic_batches(2)
    learner.step(good)
    weights = copy.deepcopy(learner.agent.state_dict())
    optimizer = copy.deepcopy(learner.optimizer.state_dict())
    frames = learner.frames
    bad.reward[3, 1] = float("nan")
    metrics = learner.step(bad)
    assert metrics["skipped_updates"] == 1 and learner.bad_updates_in_a_row == 1
    assert learner.steps == 1 and learner.frames > frames  # no update, but the batch's frames were consumed
    for name, value in learner.agent.state_dict().items():
        assert torch.equal(value, weights[name]), name
    assert all(torch.equal(optimizer["state"][k]["square_avg"], v["square_avg"]) for k, v in learner.optimizer.state_dict()["state"].items())
    learner.step(good)
    assert learner.bad_updates_in_a_row == 0 and learner.steps == 2
