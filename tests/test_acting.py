"""The acting step: `Acting`'s numpy MLP path (and the actor's torch-free answer through it) and small-grid CNN path against `act`, and sampling by the inverse CDF (torch and numpy)."""

import sys

import numpy as np
import pytest
import torch

import tests.flaky_env  # noqa: F401  (registers ShortCartPole-v0: a time limit every 5 steps)
from pronghorn.acting import Acting, act, sample_actions_numpy
from pronghorn.actor import LocalPolicy
from pronghorn.config import Config
from pronghorn.envs import make_batched, probe
from pronghorn.models import Agent, SmallTorso, sample_actions


def _inputs(b: int, seed: int, lstm: bool = False, core_size: int = 1):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(b, 4, generator=g)
    last_action = torch.randint(0, 3, (b,), generator=g)
    reward = torch.randn(b, generator=g) if lstm else None
    done = torch.rand(b, generator=g) < 0.3 if lstm else None
    core = torch.randn(2, b, core_size, generator=g) if lstm else torch.zeros(2, b, 1)
    uniform = torch.rand(b, 1, generator=g)
    return obs, last_action, reward, done, core, uniform


def _same(got, expected):
    """Acting's [B] results against act's [1, B] ones."""
    (out, core, values), (out_e, core_e, values_e) = got, expected
    out_e = type(out_e)(*(field[0] for field in out_e))
    torch.testing.assert_close(out.policy_logits, out_e.policy_logits)
    torch.testing.assert_close(out.baseline, out_e.baseline)
    assert torch.equal(out.action, out_e.action)
    torch.testing.assert_close(core, core_e)
    assert (values is None) == (values_e is None)
    if values is not None:
        torch.testing.assert_close(values, values_e)


@torch.inference_mode()
def test_the_numpy_mlp_step_gives_act_s_logits_values_and_actions():
    torch.manual_seed(0)
    agent = Agent((4,), 3).eval()
    acting = Acting(agent, max_rows=8)
    assert acting.mode == "numpy"
    for seed, b in ((1, 8), (2, 5), (3, 8)):  # buffers are reused across calls of different sizes
        obs, last_action, _, _, core, uniform = _inputs(b, seed)
        _same(acting(obs, last_action, None, None, core, None, uniform), act(agent, obs, last_action, None, None, core, None, uniform))
        # Time limits cut rows 1 and b-1: their V(final_obs) rides in the same products.
        cut, final_obs = torch.tensor([1, b - 1]), torch.randn(2, 4)
        expected = act(agent, obs, last_action, None, None, core, None, uniform, cut, final_obs)
        _same(acting(obs, last_action, None, None, core, None, uniform, cut, final_obs), expected)
        # The actor's own entry, numpy in and out, gives the same actions, logits and values.
        action, logits, values = acting.numpy_answer(obs.numpy(), uniform.numpy(), final_obs.numpy())
        assert isinstance(action, np.ndarray) and action.dtype == np.int64
        assert np.array_equal(action, expected[0].action[0].numpy())
        np.testing.assert_allclose(logits, expected[0].policy_logits[0].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(values, expected[2].numpy(), rtol=1e-5, atol=1e-6)
        action, logits, values = acting.numpy_answer(obs.numpy(), uniform.numpy())
        assert values is None and np.array_equal(action, act(agent, obs, last_action, None, None, core, None, uniform)[0].action[0].numpy())


@torch.inference_mode()
def test_the_numpy_mlp_step_flattens_observations_into_its_input_buffer():
    """It copies the observations, flattened and cast to float32, beside the column of ones that multiplies the
    first product's biases: observations of two dimensions, in uint8 and float64, answer as `act` does."""
    torch.manual_seed(0)
    agent = Agent((2, 3), 4).eval()
    acting = Acting(agent, max_rows=6)
    assert acting.mode == "numpy"
    for seed, dtype in ((1, torch.float64), (2, torch.uint8)):
        _, last_action, _, _, core, uniform = _inputs(6, seed)
        obs = (torch.rand(6, 2, 3, generator=torch.Generator().manual_seed(seed)) * 5).to(dtype)
        _same(acting(obs, last_action, None, None, core, None, uniform), act(agent, obs, last_action, None, None, core, None, uniform))


def test_the_actor_s_mlp_step_makes_no_torch_call():
    """Torch calls between numpy env steps cost the actor more than their own time (docs/throughput_log.md, "The actor's step
    without torch"): LocalPolicy's answer for the MLP, the slot's numpy views and the env's numpy actions
    stay in numpy. A profile hook records every C function called during the answers."""
    cfg = Config(env="ShortCartPole-v0", num_actors=1, envs_per_actor=8, batch_size=8)
    spec = probe(cfg.env, cfg)
    cfg = cfg.for_observations(spec.obs_shape)
    weights = type("W", (), dict(version=0, load_into=lambda self, model, timeout: 0))()
    policy = LocalPolicy(0, cfg, spec, weights)
    env = make_batched([cfg.env] * 8, list(range(8)), cfg)
    out, action = env.reset(), np.zeros(8, np.int64)
    called = []

    def hook(frame, event, arg):
        if event == "c_call":
            called.append(f"{getattr(arg, '__module__', None) or type(getattr(arg, '__self__', None)).__module__}.{arg.__name__}")

    truncated = 0
    for _ in range(30):  # time limits every 5 steps: the cut rows' values come in numpy too
        sys.setprofile(hook)
        answer = policy.answer(out, action)
        sys.setprofile(None)
        assert all(isinstance(a, np.ndarray) for a in (answer.action, answer.policy_logits, answer.core_before, answer.truncation_value))
        action = answer.action
        out = env.step(action)
        truncated += int(out.truncated.any())
    env.close()
    assert truncated and called  # the hook saw the numpy calls, and time limits were answered
    assert not [name for name in called if name.startswith("torch")], sorted(set(called))


def test_the_numpy_step_hands_out_new_actions_at_every_call():
    """The actor passes the last actions back as the next call's last_action and writes them into the slot
    after that call: a reused buffer would overwrite them. Outside inference mode, as the actors call it."""
    torch.manual_seed(3)
    agent = Agent((4,), 2).eval()
    acting = Acting(agent, max_rows=16)
    obs, last_action, _, _, core, _ = _inputs(16, 9)
    first = acting(obs, last_action, None, None, core, None, torch.zeros(16, 1))[0].action
    kept = first.clone()
    second = acting(obs, last_action, None, None, core, None, torch.full((16, 1), 0.999))[0].action
    assert torch.equal(first, kept) and not torch.equal(first, second)
    assert first.dtype == torch.int64 and not first.requires_grad


@torch.inference_mode()
def test_weights_loaded_into_the_agent_are_used_at_the_next_call():
    torch.manual_seed(1)
    agent, other = Agent((4,), 3).eval(), Agent((4,), 3).eval()
    acting = Acting(agent, max_rows=6)
    obs, last_action, _, _, core, uniform = _inputs(6, 7)
    before = acting(obs, last_action, None, None, core, None, uniform)[0].policy_logits.clone()  # a copy: the buffers are reused
    agent.load_state_dict(other.state_dict())  # as WeightStore.load_into does: in place
    after = acting(obs, last_action, None, None, core, None, uniform)
    assert not torch.allclose(before, after[0].policy_logits)
    _same(after, act(other, obs, last_action, None, None, core, None, uniform))


@torch.inference_mode()
def test_the_small_grid_cnn_steps_through_its_torso_and_the_shared_heads():
    torch.manual_seed(4)
    agent = Agent((4, 10, 10), 3, model="small").eval()
    acting = Acting(agent, max_rows=24)
    assert acting.mode == "torso"
    g = torch.Generator().manual_seed(5)
    # 8 rows take the im2col convolution, 24 oneDNN's (SmallTorso.forward): both as act computes them.
    for b in (8, 24, 8):
        obs = (torch.rand(b, 4, 10, 10, generator=g) < 0.2).to(torch.uint8)
        last_action, core, uniform = torch.randint(0, 3, (b,), generator=g), agent.initial_state(b), torch.rand(b, 1, generator=g)
        _same(acting(obs, last_action, None, None, core, None, uniform), act(agent, obs, last_action, None, None, core, None, uniform))
        cut, final_obs = torch.tensor([0, b - 1]), (torch.rand(2, 4, 10, 10, generator=g) < 0.2).to(torch.uint8)
        _same(
            acting(obs, last_action, None, None, core, None, uniform, cut, final_obs),
            act(agent, obs, last_action, None, None, core, None, uniform, cut, final_obs),
        )


def test_the_small_grid_cnn_s_two_convolutions_agree_forward_and_backward():
    """A few grids take the im2col kernel, many oneDNN's: the same function, gradients included (a learner
    batch of T x B <= 16 rows trains through the first)."""
    torch.manual_seed(6)
    torso = SmallTorso((4, 10, 10))
    x = (torch.rand(16, 4, 10, 10) < 0.2).float()
    few = torso(x)  # 16 rows: im2col
    few.square().sum().backward()
    grads = [p.grad.clone() for p in torso.parameters()]
    torso.zero_grad()
    many = torso(torch.cat([x, torch.zeros_like(x)]))[:16]  # 32 rows take oneDNN; the loss reads the first 16
    many.square().sum().backward()
    torch.testing.assert_close(few, many)
    for got, p in zip(grads, torso.parameters()):
        torch.testing.assert_close(got, p.grad)


@pytest.mark.parametrize("kind", ["lstm", "popart", "shallow"])
@torch.inference_mode()
def test_other_agents_go_through_act(kind):
    torch.manual_seed(2)
    if kind == "shallow":
        agent = Agent((4, 84, 84), 3, model="shallow").eval()
        acting = Acting(agent, max_rows=2)
        obs = torch.randint(0, 255, (2, 4, 84, 84), dtype=torch.uint8)
        args = (obs, torch.zeros(2, dtype=torch.long), None, None, agent.initial_state(2), None, torch.rand(2, 1))
    else:
        agent = Agent((4,), 3, lstm=kind == "lstm", popart_levels=2 if kind == "popart" else 0).eval()
        acting = Acting(agent, max_rows=5)
        obs, last_action, reward, done, core, uniform = _inputs(5, 3, lstm=kind == "lstm", core_size=agent.core_size)
        args = (obs, last_action, reward, done, core, torch.tensor([0, 1, 0, 1, 1]), uniform)
    assert acting.mode == "act"
    _same(acting(*args), act(agent, *args))


def test_sampling_counts_the_cdf_entries_below_the_draw_and_follows_the_softmax():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(2000, 5, generator=g) * 3
    uniform = torch.rand(2000, 1, generator=g)
    cdf = torch.softmax(logits, -1).cumsum(-1)
    assert torch.equal(sample_actions(logits, uniform), (cdf < uniform * cdf[:, -1:]).sum(-1))
    # The MLP's numpy step samples the same way: the same actions from the same logits and draws.
    assert torch.equal(torch.from_numpy(sample_actions_numpy(logits.numpy(), uniform.numpy())), sample_actions(logits, uniform))
    for actions in (1, 2, 6):  # its running sum and count go row by row over the actions: every count of rows
        few = torch.randn(2000, actions, generator=g) * 3
        assert torch.equal(torch.from_numpy(sample_actions_numpy(few.numpy(), uniform.numpy())), sample_actions(few, uniform)), actions
    transposed = np.ascontiguousarray(logits.numpy().T).T  # the layout Acting passes: [N, A] viewing [A, N]
    assert np.array_equal(sample_actions_numpy(transposed, uniform.numpy()), sample_actions_numpy(logits.numpy(), uniform.numpy()))
    top = torch.full((2000, 1), torch.nextafter(torch.tensor(1.0), torch.tensor(0.0)).item())  # the largest draw below 1
    assert torch.equal(sample_actions(logits, top), (cdf < top * cdf[:, -1:]).sum(-1)) and sample_actions(logits, top).max() <= 4
    assert sample_actions_numpy(logits.numpy(), top.numpy()).max() <= 4
    assert sample_actions_numpy(np.array([[np.nan, 0.0]], np.float32), np.array([[0.5]], np.float32)).tolist() == [0]
    row = torch.tensor([[0.0, 1.0, 2.0]])
    draws = sample_actions(row.expand(60_000, 3), torch.rand(60_000, 1, generator=g))
    frequencies = torch.bincount(draws, minlength=3).float() / 60_000
    torch.testing.assert_close(frequencies, torch.softmax(row[0], 0), atol=0.01, rtol=0)
    numpy_draws = sample_actions_numpy(row.expand(60_000, 3).numpy(), torch.rand(60_000, 1, generator=g).numpy())
    torch.testing.assert_close(torch.from_numpy(np.bincount(numpy_draws, minlength=3) / 60_000).float(), torch.softmax(row[0], 0), atol=0.01, rtol=0)
