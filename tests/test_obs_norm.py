"""--normalize-observations: running statistics equal to those of everything seen, standardised and
clipped inputs, updated by the learner from fresh observations only, carried to actors and checkpoints."""

import pytest
import torch

from pronghorn.acting import Acting
from pronghorn.config import Config
from pronghorn.learner import Learner
from pronghorn.models import Agent, build_agent
from pronghorn.obs_norm import CLIP, EPS, ObservationNorm
from tests.helpers import synthetic_batches


def test_batched_updates_give_the_statistics_of_all_observations_at_once():
    g = torch.Generator().manual_seed(0)
    norm = ObservationNorm((3,))
    batches = [torch.randn(n, 3, generator=g) * torch.tensor([1.0, 20.0, 0.1]) + torch.tensor([5.0, -100.0, 0.0]) for n in (7, 50, 1, 33)]
    for x in batches:
        norm.update(x)
    everything = torch.cat(batches)
    torch.testing.assert_close(norm.mean.data, everything.mean(0))
    torch.testing.assert_close(norm.var.data, everything.var(0, correction=0))
    assert norm.count.item() == len(everything)


def test_a_batch_of_many_chunks_gets_the_statistics_and_the_standardisation_of_the_whole_batch():
    # Pong's stacks: about 37 rows per chunk on CPU, so 100 rows are three chunks, the last one partial.
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (100, 4, 84, 84), dtype=torch.uint8, generator=g)
    frames[:, :, :20] = 87  # a background that never changes: variance 0
    norm = ObservationNorm((4, 84, 84))
    norm.update(frames[:30])
    norm.update(frames[30:])
    exact = frames.double().reshape(100, -1)
    torch.testing.assert_close(norm.mean.data.reshape(-1), exact.mean(0).float())
    torch.testing.assert_close(norm.var.data.reshape(-1), exact.var(0, correction=0).float())
    assert (norm.var.data[:, :20] == 0).all()
    # The whole-batch formula (the GPU's and a compiled graph's), element for element, in either layout.
    expected = frames.float().sub_(norm.mean).mul_(torch.rsqrt(norm.var + EPS)).clamp_(-CLIP, CLIP).reshape(4, 25, 4, 84, 84)
    for channels_last in (False, True):
        out = norm(frames.reshape(4, 25, 4, 84, 84), channels_last=channels_last)
        assert out.shape == expected.shape and torch.equal(out, expected)
        rows = out.reshape(100, 4, 84, 84)  # as the torso reads them: channels last without another copy
        assert rows.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def test_float_inputs_are_left_as_they_were():
    norm = ObservationNorm((3,))
    x = torch.randn(50, 3) * 4 + 2
    before = x.clone()
    norm.update(x)
    norm(x)
    assert torch.equal(x, before)


def test_inputs_are_standardised_clipped_and_constant_elements_read_zero():
    norm = ObservationNorm((3,))
    column = torch.tensor([0.0, 0.0, 0.0, 2.0])  # mean 0.5, std ~0.866: 2.0 reads ~1.73
    norm.update(torch.stack([column, torch.full((4,), 7.0), column * 1000], dim=1))
    out = norm(torch.tensor([[2.0, 7.0, 1e9]]))
    torch.testing.assert_close(out[0, 0], torch.tensor(1.5 / 0.75**0.5))
    assert out[0, 1].item() == 0.0  # never changed: no signal, and no division by zero
    assert out[0, 2].item() == CLIP


def test_a_pixel_agent_reads_standardised_floats_without_rescaling_them():
    torch.manual_seed(0)
    agent = Agent((4, 84, 84), 6, model="nature", normalize_observations=True)
    frames = torch.randint(0, 256, (3, 2, 4, 84, 84), dtype=torch.uint8)
    agent.obs_norm.update(frames.reshape(6, 4, 84, 84))
    seen = []
    agent.torso.convs[0].register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0]))  # returns None: inputs unchanged
    args = (torch.zeros(3, 2, dtype=torch.long), None, None, agent.initial_state(2))
    agent.logits_and_values(frames, *args)
    # The first convolution sees the standardised frames (mean ~0, std ~1), not them divided by 255 as well.
    (x,) = seen
    assert x.dtype == torch.float32 and abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1) < 0.05


@pytest.mark.parametrize("model", ["shallow", "deep"])
def test_without_statistics_pixels_are_scaled_to_one_whatever_their_dtype(model):
    # Scaling is the Agent's, decided when it is built: float pixels from a custom env are divided by 255 as
    # uint8 ones are, and only an agent with statistics skips it.
    torch.manual_seed(0)
    agent = Agent((4, 84, 84), 6, model=model)
    frames = torch.randint(0, 256, (1, 2, 4, 84, 84), dtype=torch.uint8)
    args = (torch.zeros(1, 2, dtype=torch.long), None, None, agent.initial_state(2))
    from_uint8, _, _ = agent.logits_and_values(frames, *args)
    from_float, _, _ = agent.logits_and_values(frames.float(), *args)
    torch.testing.assert_close(from_float, from_uint8)


def test_the_learner_counts_fresh_observations_once_and_checkpoints_the_statistics():
    cfg = Config(normalize_observations="on", updates_per_batch=2, total_frames=10_000).for_observations((4,))
    torch.manual_seed(0)
    agent = build_agent(cfg, (4,), 2)
    learner = Learner(cfg, agent, frames_per_step=1)
    batches = synthetic_batches(3, T=5, B=4)
    for batch in batches:
        for k in range(cfg.updates_per_batch):
            learner.step(batch, fresh=3, count=k == 0)
    # Rows 0..T-1 of the 3 fresh columns of each batch: row T and the replayed column are not counted,
    # nor is the second pass over a batch.
    counted = torch.cat([b.obs[:-1, :3].reshape(-1, 4) for b in batches])
    assert agent.obs_norm.count.item() == len(counted) == 3 * 5 * 3
    torch.testing.assert_close(agent.obs_norm.mean.data, counted.mean(0))
    restored = Learner(cfg, build_agent(cfg, (4,), 2), frames_per_step=1)
    restored.load_state_dict(learner.state_dict())
    for name in ("mean", "var", "count"):
        torch.testing.assert_close(getattr(restored.agent.obs_norm, name), getattr(agent.obs_norm, name))


def test_the_statistics_travel_to_the_actors_and_the_acting_step_applies_them():
    from pronghorn.runtime.shm import WeightStore, new_token

    torch.manual_seed(0)
    learner_agent, actor_agent = Agent((4,), 2, normalize_observations=True), Agent((4,), 2, normalize_observations=True)
    learner_agent.obs_norm.update(torch.randn(100, 4) * 10 + 3)
    store = WeightStore.create(new_token(), sum(p.numel() for p in learner_agent.parameters()))
    try:
        store.publish(learner_agent, 1)
        store.load_into(actor_agent, timeout=5)
    finally:
        store.release()
    torch.testing.assert_close(actor_agent.obs_norm.mean, learner_agent.obs_norm.mean)
    obs = torch.randn(5, 4) * 10 + 3
    args = (torch.zeros(5, dtype=torch.long), None, None, actor_agent.initial_state(5), None, torch.full((5, 1), 0.5))
    out, _, _ = Acting(actor_agent, max_rows=5)(obs, *args)
    logits, values, _ = learner_agent.logits_and_values(obs[None], torch.zeros(1, 5, dtype=torch.long), None, None, learner_agent.initial_state(5))
    torch.testing.assert_close(out.policy_logits, logits[0])
    torch.testing.assert_close(out.baseline, values[0])


@pytest.mark.parametrize(
    "model,shape,expected",
    [("auto", (4,), "off"), ("auto", (10, 10, 10), "off"), ("shallow", (4, 84, 84), "on"), ("nature", (4, 84, 84), "on"), ("deep", (4, 84, 84), "off")],
)
def test_auto_standardises_for_the_shallow_and_nature_cnns_only(model, shape, expected):
    from pronghorn.cli import parse_config

    cfg = parse_config(["--model", model]).for_observations(shape)
    assert cfg.normalize_observations == expected
    assert (build_agent(cfg, shape, 3).obs_norm is not None) is (expected == "on")
    assert parse_config(["--model", model, "--normalize-observations", "off"]).for_observations(shape).normalize_observations == "off"


def test_a_run_from_before_the_flag_resumes_and_evaluates_without_statistics():
    from pronghorn.config import BEFORE_IT_EXISTED

    saved = Config(env="ALE/Pong-v5", normalize_observations="off").for_observations((4, 84, 84)).__dict__.copy()
    del saved["normalize_observations"]  # what an older checkpoint's config holds
    now = Config(env="ALE/Pong-v5").for_observations((4, 84, 84))
    assert now.resume_conflicts(saved) == ["--normalize-observations is 'on' here but 'off' in the run"]
    assert Config(env="ALE/Pong-v5", normalize_observations="off").for_observations((4, 84, 84)).resume_conflicts(saved) == []
    assert Config(**{**BEFORE_IT_EXISTED, **saved}).normalize_observations == "off"  # how evaluate reads its config.json


def test_an_unresolved_config_builds_no_agent():
    with pytest.raises(ValueError, match=r"call Config\.for_observations first"):
        build_agent(Config(), (4,), 2)
