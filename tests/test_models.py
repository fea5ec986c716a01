import pytest
import torch

from pronghorn.acting import act
from pronghorn.models import Agent


@pytest.mark.parametrize("model,shape", [("mlp", (4,)), ("shallow", (4, 84, 84)), ("deep", (4, 84, 84))])
@pytest.mark.parametrize("lstm", [False, True])
def test_shapes_time_major(model, shape, lstm):
    agent = Agent(shape, 6, model=model, lstm=lstm)
    T, B = 3, 2
    obs = torch.randint(0, 255, (T, B, *shape), dtype=torch.uint8) if len(shape) == 3 else torch.randn(T, B, *shape)
    out, state = agent(obs, torch.zeros(T, B, dtype=torch.long), torch.zeros(T, B), torch.zeros(T, B, dtype=torch.bool), agent.initial_state(B))
    assert out.policy_logits.shape == (T, B, 6) and out.baseline.shape == (T, B) and out.action.shape == (T, B)
    assert state.shape == agent.initial_state(B).shape
    greedy, _ = agent(obs, torch.zeros(T, B, dtype=torch.long), torch.zeros(T, B), torch.zeros(T, B, dtype=torch.bool), agent.initial_state(B), greedy=True)
    torch.testing.assert_close(greedy.action, greedy.policy_logits.argmax(-1))


def test_lstm_state_resets_where_an_episode_starts():
    torch.manual_seed(0)
    agent = Agent((4,), 3, lstm=True)
    T, B = 5, 2
    obs = torch.randn(T, B, 4)
    last_action = torch.randint(0, 3, (T, B))
    reward = torch.randn(T, B)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 0] = True  # env 0 starts a new episode at t=2
    state = torch.randn(2, B, agent.core_size)
    out, _ = agent(obs, last_action, reward, done, state)
    # From t=2 on, env 0 must behave as if started fresh at t=2 (zero state, zeroed action/reward inputs).
    fresh, _ = agent(
        obs[2:, :1],
        torch.zeros(T - 2, 1, dtype=torch.long).index_fill(0, torch.tensor([1, 2]), 0) + last_action[2:, :1] * (torch.arange(T - 2)[:, None] > 0),
        reward[2:, :1] * (torch.arange(T - 2)[:, None] > 0),
        done[2:, :1],
        torch.zeros(2, 1, agent.core_size),
    )
    torch.testing.assert_close(out.baseline[2:, 0], fresh.baseline[:, 0])
    # ...while env 1 carries its memory through.
    carried, _ = agent(obs[2:, 1:], last_action[2:, 1:], reward[2:, 1:], done[2:, 1:], torch.zeros(2, 1, agent.core_size))
    assert not torch.allclose(out.baseline[2:, 1], carried.baseline[:, 0])


def test_image_model_on_vector_observations_is_refused():
    with pytest.raises(ValueError, match="--model shallow needs image observations"):
        Agent((4,), 2, model="shallow")


@pytest.mark.parametrize("lstm", [False, True])
def test_nature_cnn_shapes(lstm):
    agent = Agent((4, 84, 84), 6, model="nature", lstm=lstm)
    assert agent.torso.out_size == 512 and [m.out_channels for m in agent.torso.convs if hasattr(m, "out_channels")] == [32, 64, 64]
    obs = torch.randint(0, 255, (2, 3, 4, 84, 84), dtype=torch.uint8)
    out, _ = agent(obs, torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool), agent.initial_state(3))
    assert out.policy_logits.shape == (2, 3, 6)


def test_orthogonal_init_gives_a_near_uniform_first_policy_and_zero_biases():
    from pronghorn.config import Config
    from pronghorn.models import build_agent

    torch.manual_seed(0)
    agent = build_agent(Config(env="ALE/Pong-v5", model="shallow", normalize_observations="off").for_observations((4, 84, 84)), (4, 84, 84), 6)
    for module in agent.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
            assert torch.count_nonzero(module.bias) == 0
    w = agent.torso.fc.weight
    torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(w.shape[0]), atol=1e-4, rtol=0)  # orthogonal rows, gain sqrt 2
    obs = torch.randint(0, 255, (1, 16, 4, 84, 84), dtype=torch.uint8)
    out, _ = agent(obs, torch.zeros(1, 16, dtype=torch.long), torch.zeros(1, 16), torch.zeros(1, 16, dtype=torch.bool), agent.initial_state(16))
    probs = out.policy_logits.softmax(-1)
    assert (probs - 1 / 6).abs().max() < 0.02  # policy head gain 0.01
    torch_default = build_agent(Config(env="ALE/Pong-v5", model="shallow", init="torch").for_observations((4, 84, 84)), (4, 84, 84), 6)
    assert torch.count_nonzero(torch_default.torso.fc.bias) > 0


@pytest.mark.parametrize(
    "model,shape,message",
    [
        ("deep", (4,), "--model deep needs image observations"),
        ("nature", (4,), "--model nature needs image observations"),
        ("shallow", (10, 10, 10), "--model shallow needs larger images"),
        ("nature", (7, 10, 10), "--model nature needs larger images"),
    ],
)
def test_a_model_that_does_not_fit_the_observations_is_refused(model, shape, message):
    with pytest.raises(ValueError, match=message):
        Agent(shape, 2, model=model)


@pytest.mark.parametrize("model", ["small", "deep"])
@pytest.mark.parametrize("lstm", [False, True])
def test_every_image_torso_takes_small_grids_it_fits(model, lstm):
    agent = Agent((10, 10, 10), 6, model=model, lstm=lstm)  # MinAtar-sized
    obs = torch.randint(0, 2, (2, 3, 10, 10, 10), dtype=torch.uint8)
    out, _ = agent(obs, torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool), agent.initial_state(3))
    assert out.baseline.shape == (2, 3)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--env", "CartPole-v1", "--model", "deep"], "--model deep needs image observations"),
        (["--env", "MinAtar/Breakout-v1", "--model", "nature"], "--model nature needs larger images"),
    ],
)
def test_the_command_line_refuses_a_model_that_does_not_fit_with_exit_2(tmp_path, args, message):
    from tests.helpers import assert_no_leaks, run_cli

    proc, _out, err = run_cli(["train", *args, "--total-frames", "1k", "--logdir", str(tmp_path / "run"), "--no-progress"], timeout=120)
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in err, err
    assert_no_leaks(owners=(proc.pid,))


@pytest.mark.parametrize("lstm", [False, True], ids=["mlp", "lstm"])
def test_act_bootstraps_cut_rows_in_the_same_pass_as_two_separate_passes_would(lstm):
    torch.manual_seed(0)
    agent = Agent((4,), 3, lstm=lstm, popart_levels=2)
    B = 5
    obs, final_obs = torch.randn(B, 4), torch.randn(2, 4)
    last_action, reward = torch.randint(0, 3, (B,)), torch.randn(B)
    done = torch.tensor([False, True, False, True, False])  # rows 1 and 3: a time limit, obs is the next episode's first
    core = torch.randn(2, B, max(1, agent.core_size))
    level, uniform = torch.tensor([0, 1, 0, 1, 1]), torch.rand(B, 1)
    cut = torch.tensor([1, 3])
    r, d = (reward, done) if lstm else (None, None)

    out, new_core, values = act(agent, obs, last_action, r, d, core, level, uniform, cut, final_obs)

    alone, alone_core = agent(obs[None], last_action[None], reward[None], done[None], core, level=level, uniform=uniform)
    assert torch.equal(out.action, alone.action)  # the B rows drew what they would without the extra rows
    torch.testing.assert_close(out.policy_logits, alone.policy_logits)
    torch.testing.assert_close(new_core, alone_core)
    # V(final_obs): the core state from before the reset, the same last action and reward, no episode start.
    cut_out, _ = agent(final_obs[None], last_action[cut][None], reward[cut][None], torch.zeros(1, 2, dtype=torch.bool), core[:, cut], level=level[cut])
    torch.testing.assert_close(values, cut_out.baseline[0])
    if lstm:  # the extra rows matter: started afresh, the same final_obs would be valued otherwise
        fresh, _ = agent(final_obs[None], last_action[cut][None], reward[cut][None], torch.ones(1, 2, dtype=torch.bool), core[:, cut], level=level[cut])
        assert not torch.allclose(values, fresh.baseline[0])
    assert act(agent, obs, last_action, r, d, core, level, uniform)[2] is None  # nothing cut: no values


@pytest.mark.parametrize("model", ["shallow", "nature", "deep"])
def test_channels_last_on_cpu_gives_the_nchw_outputs_and_gradients(model, monkeypatch):
    # models._conv_layout runs the convolutions channels last on CPU (faster there); flatten must still
    # read the features in NCHW order, so the fc weights and every gradient mean what they meant before.
    from pronghorn import models

    torch.manual_seed(0)
    agent = Agent((4, 84, 84), 6, model=model, normalize_observations=True)
    T, B = 3, 2
    obs = torch.randint(0, 256, (T, B, 4, 84, 84), dtype=torch.uint8)
    agent.obs_norm.update(obs)
    last_action = torch.zeros(T, B, dtype=torch.int64)

    def outputs_and_grads():
        agent.zero_grad()
        logits, values, _ = agent.logits_and_values(obs, last_action, None, None, agent.initial_state(B))
        (logits.square().sum() + values.sum()).backward()
        grads = [p.grad.clone() for p in agent.parameters() if p.requires_grad]
        return logits.detach(), values.detach(), grads

    seen = []
    layout = models._conv_layout
    monkeypatch.setattr(models, "_conv_layout", lambda x, always: seen.append(layout(x, always)) or seen[-1])
    logits, values, grads = outputs_and_grads()
    assert seen and seen[-1].is_contiguous(memory_format=torch.channels_last) and not seen[-1].is_contiguous()
    monkeypatch.setattr(models, "_conv_layout", lambda x, always: x)
    ref_logits, ref_values, ref_grads = outputs_and_grads()
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(values, ref_values, rtol=1e-4, atol=1e-5)
    for g, ref in zip(grads, ref_grads):
        torch.testing.assert_close(g, ref, rtol=1e-3, atol=1e-4)


def test_an_actor_s_step_converts_only_the_deep_torso_to_channels_last():
    from pronghorn.models import _conv_layout

    x = torch.rand(8, 4, 84, 84)
    with torch.inference_mode():  # as Acting runs an actor's step
        assert _conv_layout(x, always=False) is x  # shallow, Nature: the conversion costs more than it saves
        assert _conv_layout(x, always=True).is_contiguous(memory_format=torch.channels_last)
    assert _conv_layout(x, always=False).is_contiguous(memory_format=torch.channels_last)  # a backward follows


@pytest.mark.parametrize("bf16", [False, True])
def test_action_major_heads_give_the_row_major_outputs_and_gradients(bf16, monkeypatch):
    # models.both_heads writes the heads' product [A+1, N] on CPU; the logits are a transposed view. Outputs and
    # every gradient must be those of the row-major product it replaced, in fp32 and under the bf16 learner's autocast.
    import torch.nn.functional as F

    from pronghorn import models

    def row_major(x, weight, bias):
        both = F.linear(x, weight, bias)
        return both[:, :-1], both[:, -1]

    torch.manual_seed(0)
    agent = Agent((4,), 3)
    T, B = 5, 7
    obs, last_action = torch.randn(T, B, 4), torch.zeros(T, B, dtype=torch.int64)

    def outputs_and_grads():
        agent.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits, values, _ = agent.logits_and_values(obs, last_action, None, None, agent.initial_state(B))
        logits, values = logits.float(), values.float()
        (torch.log_softmax(logits, -1)[..., 1].sum() + values.square().sum()).backward()
        return logits.detach(), values.detach(), [p.grad.clone() for p in agent.parameters()]

    logits, values, grads = outputs_and_grads()
    assert logits.shape == (T, B, 3) and values.shape == (T, B)
    assert logits.stride(-1) == T * B and values.is_contiguous()  # one contiguous row per action, and the values'
    monkeypatch.setattr(models, "both_heads", row_major)
    ref_logits, ref_values, ref_grads = outputs_and_grads()
    assert ref_logits.stride(-1) == 1
    tolerance = dict(rtol=2e-2, atol=2e-2) if bf16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits, ref_logits, **tolerance)
    torch.testing.assert_close(values, ref_values, **tolerance)
    for g, ref in zip(grads, ref_grads):
        torch.testing.assert_close(g, ref, **tolerance)


@pytest.mark.parametrize("inputs,narrow", [(4, True), (8, True), (9, False), (64, False)])
def test_the_mlp_s_first_layer_multiplies_a_row_major_weight_only_for_a_few_inputs(inputs, narrow):
    from torch import nn

    from pronghorn.models import MLPTorso, NarrowLinear

    torch.manual_seed(0)
    torso = MLPTorso((inputs,), 16)
    first = torso.net[0]
    assert isinstance(first, NarrowLinear) is narrow and isinstance(first, nn.Linear)
    assert list(torso.state_dict()) == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]  # checkpoints unchanged
    plain = nn.Linear(inputs, 16)
    plain.load_state_dict(first.state_dict())
    x, grad = torch.randn(50, inputs), torch.randn(50, 16)
    for layer in (first, plain):
        layer(x).backward(grad)
    torch.testing.assert_close(first(x), plain(x))
    torch.testing.assert_close(first.weight.grad, plain.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(first.bias.grad, plain.bias.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_deep_torso_s_max_pool_op_gives_aten_s_values_and_gradients(dtype):
    """pronghorn/max_pool.py's custom op (what a compiled learner on CPU runs) against F.max_pool2d, on NCHW and
    channels-last inputs with ties (0/1 values): the same pooled values and the same input gradients, bit for
    bit; torch.library.opcheck checks its fake (shape) functions and its autograd registration."""
    import torch.nn.functional as F

    from pronghorn.max_pool import MaxPool, _max_pool

    g = torch.Generator().manual_seed(0)
    for layout in (torch.contiguous_format, torch.channels_last):
        x = (torch.rand(3, 5, 11, 10, generator=g) < 0.5).to(dtype).contiguous(memory_format=layout).requires_grad_()
        grad = torch.randn(3, 5, 6, 5, generator=g).to(dtype)
        expected = F.max_pool2d(x, 3, stride=2, padding=1)
        (want,) = torch.autograd.grad(expected, x, grad)
        got = _max_pool(x)[0]
        (seen,) = torch.autograd.grad(got, x, grad)
        assert torch.equal(got, expected) and torch.equal(seen, want)
        assert torch.equal(MaxPool()(x), expected)  # eager: F.max_pool2d itself
        torch.library.opcheck(_max_pool, (x.detach().requires_grad_(),))


def test_a_compiled_deep_torso_runs_its_max_pools_as_the_custom_op():
    """Compiled on CPU, the three max-pools reach the graph as pronghorn::max_pool_3x3_s2 (which inductor calls as
    it is), not as aten's max_pool2d that it would lower into its own slower loops."""
    from pronghorn.models import DeepTorso

    ops: list[str] = []

    def backend(gm, inputs):
        ops.extend(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm.forward

    torso = DeepTorso((4, 84, 84))
    x = torch.rand(2, 4, 84, 84, generator=torch.Generator().manual_seed(0)) * 255
    torch.testing.assert_close(torch.compile(torso, backend=backend)(x), torso(x))
    assert sum("pronghorn.max_pool_3x3_s2" in op for op in ops) == 3, ops
    assert not any("max_pool2d" in op for op in ops), ops
