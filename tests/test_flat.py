"""One flat tensor for the learner's weights and one for its gradients (flat.py), against PyTorch's own per-parameter path."""

import copy

import torch

from pronghorn.config import Config
from pronghorn.flat import flat_view, flatten_parameters, optimizer_state_to_flat, optimizer_step
from pronghorn.learner import Learner
from pronghorn.models import Agent
from tests.helpers import synthetic_batches


def _loss(agent: Agent, obs: torch.Tensor) -> torch.Tensor:
    logits, values, _ = agent.logits_and_values(obs, torch.zeros(obs.shape[:2], dtype=torch.long), None, None, agent.initial_state(obs.shape[1]))
    return (logits.logsumexp(-1) * torch.arange(obs.shape[1])).sum() + (values**2).sum()


def test_parameters_become_views_and_gradients_land_in_the_flat_gradient():
    torch.manual_seed(0)
    agent = Agent((4,), 3)
    plain = copy.deepcopy(agent)
    flat = flatten_parameters(agent)
    names = [n for n, _ in agent.named_parameters()]
    assert names == [n for n, _ in plain.named_parameters()]  # same parameters, same names: checkpoints are unchanged
    torch.testing.assert_close(flat.detach(), torch.cat([p.detach().reshape(-1) for p in plain.parameters()]), rtol=0, atol=0)
    assert flat_view([p.detach() for p in agent.parameters()]).data_ptr() == flat.data_ptr()
    assert flat_view([p.detach() for p in plain.parameters()]) is None  # separate tensors: not one flat view

    obs = torch.randn(5, 3, 4)
    _loss(agent, obs).backward()
    _loss(plain, obs).backward()
    expected = torch.cat([p.grad.reshape(-1) for p in plain.parameters()])
    torch.testing.assert_close(flat.grad, expected)
    with torch.no_grad():
        flat.add_(1.0)  # writing the flat tensor writes the agent's weights
    torch.testing.assert_close(agent.policy.weight, plain.policy.weight + 1.0)


def test_one_flat_rmsprop_step_is_the_per_parameter_step():
    torch.manual_seed(1)
    agent = Agent((4,), 2)
    plain = copy.deepcopy(agent)
    flat = flatten_parameters(agent)
    opt_flat = torch.optim.RMSprop([flat], lr=0.01, alpha=0.99, eps=0.01)
    opt_plain = torch.optim.RMSprop(plain.parameters(), lr=0.01, alpha=0.99, eps=0.01)
    for _ in range(3):
        obs = torch.randn(4, 2, 4)
        flat.grad.zero_()
        opt_plain.zero_grad()
        _loss(agent, obs).backward()
        _loss(plain, obs).backward()
        opt_flat.step()
        opt_plain.step()
    for (name, p), q in zip(agent.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p, q, msg=name)


def test_the_flat_optimizer_step_moves_weights_and_state_as_pytorch_s_step_does():
    """optimizer_step's own RMSProp ops give PyTorch's weights and state bit for bit, with and without momentum
    and after a state_dict round trip; Adam goes through its own step."""
    for make in (
        lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.99, eps=0.01),
        lambda p: torch.optim.RMSprop(p, lr=0.02, alpha=0.9, eps=1e-5, momentum=0.5),
        lambda p: torch.optim.Adam(p, lr=0.01),
    ):
        torch.manual_seed(4)
        agent = Agent((4,), 2)
        reference = copy.deepcopy(agent)
        flat, flat_ref = flatten_parameters(agent), flatten_parameters(reference)
        opt, opt_ref = make([flat]), make([flat_ref])
        start = flat.detach().clone()
        for step in range(4):
            if step == 2:  # a resumed run: the state loaded from a state_dict, then stepped the same way
                opt = make([flat])
                opt.load_state_dict(copy.deepcopy(opt_ref.state_dict()))
            obs = torch.randn(4, 2, 4)
            for f, a in ((flat, agent), (flat_ref, reference)):
                f.grad.zero_()
                _loss(a, obs).backward()
            optimizer_step(opt, flat)
            opt_ref.step()
            torch.testing.assert_close(flat, flat_ref, rtol=0, atol=0)
        state, state_ref = opt.state[flat], opt_ref.state[flat_ref]
        assert state.keys() == state_ref.keys()
        for key in state:
            torch.testing.assert_close(state[key], state_ref[key], rtol=0, atol=0, msg=key)
        assert not torch.equal(flat.detach(), start)  # the steps moved the weights


def test_per_parameter_optimizer_state_resumes_as_one_flat_state():
    """A checkpoint written before the flat layout (one RMSprop state per parameter) resumes exactly."""
    torch.manual_seed(2)
    agent = Agent((4,), 2)
    plain = copy.deepcopy(agent)
    opt_plain = torch.optim.RMSprop(plain.parameters(), lr=0.01, eps=0.01, momentum=0.5)
    for _ in range(2):
        opt_plain.zero_grad()
        _loss(plain, torch.randn(3, 2, 4)).backward()
        opt_plain.step()
    shapes = [p.shape for p in agent.parameters()]
    agent.load_state_dict(plain.state_dict())
    flat = flatten_parameters(agent)
    opt_flat = torch.optim.RMSprop([flat], lr=0.01, eps=0.01, momentum=0.5)
    opt_flat.load_state_dict(optimizer_state_to_flat(opt_plain.state_dict(), shapes))
    obs = torch.randn(3, 2, 4)
    opt_plain.zero_grad()
    flat.grad.zero_()
    _loss(plain, obs).backward()
    _loss(agent, obs).backward()
    opt_plain.step()
    opt_flat.step()
    for p, q in zip(agent.parameters(), plain.parameters()):
        torch.testing.assert_close(p, q)
    state = opt_flat.state_dict()
    assert optimizer_state_to_flat(state, shapes) is state  # already flat: unchanged


def test_the_learner_clips_the_global_norm_as_clip_grad_norm_does():
    def learner_clipping_at(clip: float) -> Learner:
        torch.manual_seed(3)  # the same weights in both
        learner = Learner(Config(total_frames=10_000, grad_norm_clip=clip).for_observations((4,)), Agent((4,), 2), frames_per_step=1)
        learner.optimizer.step = lambda: None  # keep the gradient the step leaves, not the weights it would move
        return learner

    batch = synthetic_batches(1)[0]
    unclipped_learner, learner = learner_clipping_at(1e9), learner_clipping_at(0.05)
    unclipped_learner.step(batch)
    metrics = learner.step(batch)
    holder = torch.nn.Parameter(torch.zeros_like(learner.flat))
    holder.grad = unclipped_learner.flat.grad.clone()
    norm = torch.nn.utils.clip_grad_norm_([holder], 0.05)
    assert norm > 0.05  # the clip was active
    torch.testing.assert_close(torch.tensor(metrics["grad_norm"]), norm)
    torch.testing.assert_close(learner.flat.grad, holder.grad)


def test_both_heads_in_one_product_give_each_head_s_own_output():
    torch.manual_seed(4)
    agent = Agent((4,), 3)
    obs = torch.randn(6, 5, 4)
    logits, values, _ = agent.logits_and_values(obs, torch.zeros(6, 5, dtype=torch.long), None, None, agent.initial_state(5))
    features = agent.torso(obs.reshape(30, 4))
    torch.testing.assert_close(logits, agent.policy(features).view(6, 5, 3))
    torch.testing.assert_close(values, agent.baseline(features).view(6, 5))
    out, _ = agent(obs, torch.zeros(6, 5, dtype=torch.long), None, None, agent.initial_state(5), greedy=True)
    torch.testing.assert_close(out.policy_logits, logits)
    torch.testing.assert_close(out.action, logits.argmax(-1))
