import copy
import dataclasses

import numpy as np
import torch

from pronghorn.config import Config
from pronghorn.learner import Learner
from pronghorn.models import Agent, build_agent
from tests.helpers import synthetic_batches


def test_a_non_finite_update_is_skipped_and_leaves_weights_and_optimizer_untouched():
    torch.manual_seed(0)
    learner = Learner(Config(total_frames=10_000).for_observations((4,)), Agent((4,), 2), frames_per_step=1)
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


def test_the_learning_rate_schedule_does_not_depend_on_the_budget():
    def lr_at(frames, **kw):
        learner = Learner(Config(**kw).for_observations((4,)), Agent((4,), 2), frames_per_step=1)
        learner.frames = frames
        return learner.learning_rate()

    assert lr_at(0, total_frames=10_000, lr_decay_frames=0) == lr_at(9_000, total_frames=50_000, lr_decay_frames=0) == 3e-3  # 0: constant
    assert lr_at(100_000, total_frames=10_000_000) == lr_at(100_000, total_frames=200_000) == 3e-3 * 0.8  # vector default: over 500k
    # A larger batch decays over as many updates as the default 16 x 20, not as many frames.
    assert Config(envs_per_actor=64, batch_size=128).for_observations((4,)).lr_decay_frames == 4_000_000
    assert Config(envs_per_actor=64).for_observations((4,)).lr_decay_frames == 2_000_000  # the batch defaults to one unroll of 64
    assert Config(unroll_length=40, lr_decay_frames=300_000).for_observations((4,)).lr_decay_frames == 300_000  # a flag wins
    assert lr_at(800_000, envs_per_actor=64, batch_size=128) == 3e-3 * 0.8
    assert lr_at(5_000, total_frames=10_000, lr_decay_frames=20_000) == lr_at(5_000, total_frames=50_000, lr_decay_frames=20_000) == 3e-3 * 0.75
    assert lr_at(30_000, total_frames=50_000, lr_decay_frames=20_000) == 0.0


def test_adam_is_available_and_dead_units_are_reported():
    torch.manual_seed(0)
    learner = Learner(Config(total_frames=10_000, optimizer="adam").for_observations((4,)), Agent((4,), 2), frames_per_step=1)
    assert isinstance(learner.optimizer, torch.optim.Adam)
    metrics = learner.step(synthetic_batches(1)[0])
    assert {"dead/net_0", "dead/net_2"} <= set(metrics) and all(0 <= metrics[k] <= 1 for k in ("dead/net_0", "dead/net_2"))
    assert "value_mean" in metrics


def test_ppo_clip_first_pass_is_impala_s_update_and_later_passes_are_clipped_to_it():
    """--ppo-clip's ratio is to the batch's first pass: that pass is IMPALA's update exactly (the ratio is 1,
    and the clipped surrogate's gradient there is the policy gradient's); later passes see the policy the
    first one moved, report how many steps left the clip, and update differently from IMPALA's."""

    def learner(**kw):
        torch.manual_seed(0)
        return Learner(Config(total_frames=10_000, learning_rate=0.001, **kw).for_observations((4,)), Agent((4,), 2), frames_per_step=1)

    batch = synthetic_batches(1, T=20, B=8)[0]
    impala, ppo = learner(updates_per_batch=2), learner(updates_per_batch=2, ppo_clip=0.1)
    impala.step(batch)
    first = ppo.step(batch)
    torch.testing.assert_close(ppo.flat, impala.flat)
    assert first["clip_fraction"] == 0.0 and "clip_fraction" not in impala.step(batch, count=False)
    second = ppo.step(batch, count=False)
    assert 0.0 < second["clip_fraction"] < 1.0
    assert not torch.allclose(ppo.flat, impala.flat)
    assert ppo.frames == impala.frames == 20 * 8  # a second pass counts no frames


def test_normalize_advantages_makes_the_update_independent_of_the_rewards_scale():
    """With the value head at 0 and no value loss, V-trace's advantages scale with the rewards. Standardised,
    the policy term is then the same for rewards x1 and x10, and so is the update; IMPALA's term grows tenfold
    beside the entropy term, so its update is not."""

    def first_update(reward_scale, **kw):
        torch.manual_seed(0)
        cfg = Config(total_frames=10_000, reward_clipping="none", baseline_cost=0.0, grad_norm_clip=1e9, **kw)
        learner = Learner(cfg.for_observations((4,)), Agent((4,), 2), frames_per_step=1)
        with torch.no_grad():
            learner.agent.baseline.weight.zero_()  # views of the learner's flat weights
            learner.agent.baseline.bias.zero_()
        batch = synthetic_batches(1, T=20, B=8)[0]
        learner.step(batch._replace(reward=batch.reward * reward_scale))
        return learner.flat.detach().clone()

    torch.testing.assert_close(first_update(1.0, normalize_advantages=True), first_update(10.0, normalize_advantages=True))
    assert not torch.allclose(first_update(1.0), first_update(10.0))
    assert not torch.allclose(first_update(1.0), first_update(1.0, normalize_advantages=True))


def test_rmsprop_init_sets_the_size_of_the_first_steps():
    """PyTorch starts RMSProp's running squares at 0: the first step moves every weight by ~10x the rate
    (lr * g / sqrt(0.01 g^2)); started at 1 (TF1's start), it moves by lr * g / sqrt(0.99 + 0.01 g^2)."""

    def first_step(init: float) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        cfg = Config(total_frames=10_000, rmsprop_init=init, grad_norm_clip=1e9).for_observations((4,))
        learner = Learner(cfg, Agent((4,), 2), frames_per_step=1)
        before = [p.detach().clone() for p in learner.agent.parameters()]
        learner.step(synthetic_batches(1)[0])
        grads = torch.cat([p.grad.flatten() for p in learner.agent.parameters() if p.grad is not None])
        moved = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, learner.agent.parameters())])
        return moved, grads

    lr, eps = 3e-3, 0.01  # the vector defaults
    moved, grads = first_step(0.0)
    assert torch.allclose(moved, lr * grads / ((0.01 * grads**2).sqrt() + eps), atol=1e-7)
    assert moved.abs().max() > 5 * lr  # the large first step that --rmsprop-init avoids
    moved, grads = first_step(1.0)
    assert torch.allclose(moved, lr * grads / ((0.99 + 0.01 * grads**2).sqrt() + eps), atol=1e-7)
    assert moved.abs().max() < lr * grads.abs().max() * 1.01


def test_bf16_learner_runs_the_torso_in_bfloat16_and_updates_like_fp32():
    import dataclasses

    import numpy as np

    for lstm in (False, True):
        cfg = Config(env="ALE/Pong-v5", model="shallow", lstm=lstm).for_observations((4, 84, 84))
        torch.manual_seed(0)
        agent = Agent((4, 84, 84), 6, model="shallow", lstm=lstm, normalize_observations=True)
        (batch,) = synthetic_batches(1, T=3, B=2, obs_shape=(4, 84, 84), obs_dtype=np.uint8, num_actions=6, core_size=agent.core_size)
        start = torch.nn.utils.parameters_to_vector(agent.parameters()).detach().clone()
        seen, result = {}, {}
        for precision in ("fp32", "bf16"):
            learner = Learner(dataclasses.replace(cfg, learner_precision=precision), copy.deepcopy(agent), frames_per_step=4)
            learner.agent.torso.register_forward_hook(lambda module, args, out, p=precision, seen=seen: seen.__setitem__(p, out.dtype))
            metrics = learner.step(batch)
            assert learner.flat.dtype == torch.float32 and learner.steps == 1  # weights and optimizer stay fp32
            result[precision] = (metrics["total_loss"], learner.flat.detach() - start)
        assert seen == {"fp32": torch.float32, "bf16": torch.bfloat16}
        (loss32, step32), (loss16, step16) = result["fp32"], result["bf16"]
        assert torch.isfinite(step16).all() and abs(loss16 - loss32) <= 0.05 * abs(loss32) + 1e-3, (lstm, loss32, loss16)
        assert torch.nn.functional.cosine_similarity(step32, step16, dim=0) > 0.98, lstm


def test_bf16_on_a_cpu_without_native_bfloat16_is_warned_about(monkeypatch, caplog):
    import logging

    from pronghorn import training

    cfg = Config(learner_precision="bf16").for_observations((4,))
    for native, warned in ((True, False), (False, True)):
        monkeypatch.setattr(training, "_cpu_has_bf16", lambda native=native: native)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pronghorn"):
            training._check_precision(cfg, torch.device("cpu"))
        assert any("no native bfloat16" in r.getMessage() for r in caplog.records) == warned
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pronghorn"):
        training._check_precision(Config().for_observations((4,)), torch.device("cpu"))  # fp32: nothing to check
    assert not caplog.records


def _record_probes(learner: Learner) -> list[int]:
    """The updates at which `learner` arms its dead-unit probe, appended as they come."""
    seen: list[int] = []
    arm = learner.dead_units.arm

    def recording_arm() -> None:
        seen.append(learner.steps)
        arm()

    learner.dead_units.arm = recording_arm  # type: ignore[method-assign]
    return seen


def test_a_compiled_learner_updates_as_the_eager_one():
    """--compile-learner changes how the update runs, not what it computes: the same batches give the same
    metrics and weights (to float rounding; fused kernels sum in another order). Twelve updates cover the
    eager probe passes (the eager learner's updates 0 and 10, the compiled one's update 0: it probes one update
    in a hundred) and the compiled ones after them: plain, with PopArt, and with
    half of each batch replayed under the trust region (whose terms run eagerly inside the compiled pass),
    and with the LSTM core; the bf16 learner over its first three updates (see below)."""
    from torch._dynamo.utils import counters

    variants = {
        "plain": {},
        "popart": dict(popart=True, levels="CartPole-v1,CartPole-v0"),
        "replay": dict(envs_per_actor=8, batch_size=16, replay_fraction=0.5, replay_kl_limit=0.5),
        "lstm": dict(lstm=True),  # its nn.LSTM runs eagerly between compiled graphs (Dynamo does not trace it)
        "bf16": dict(learner_precision="bf16"),  # autocast inside the compiled pass
    }
    for name, flags in variants.items():
        counters.clear()
        torch.manual_seed(0)
        cfg = Config(total_frames=10_000, **flags).for_observations((4,))
        agent = Agent((4,), 2, popart_levels=2 if cfg.popart else 0, lstm=cfg.lstm)
        eager = Learner(cfg, copy.deepcopy(agent), frames_per_step=1)
        compiled = Learner(dataclasses.replace(cfg, compile_learner=True), copy.deepcopy(agent), frames_per_step=1)
        batches = synthetic_batches(4, T=20, B=16, core_size=agent.core_size)
        for b in batches:
            b.policy_version[:] = -torch.arange(16)  # column j acted j updates before update 0: lag min, mean and max differ
        # bfloat16 keeps 8 bits of mantissa: fused and unfused kernels round differently at about 1e-3, and
        # the two runs' weights drift apart from there (near-cancelling terms such as pg_loss part after ~8
        # updates): bf16 is compared over its first compiled updates, the eager probe before them.
        bf16 = cfg.learner_precision == "bf16"
        tol, updates = (1e-2, 3) if bf16 else (1e-4, 12)
        fresh, weights = (8, torch.linspace(0.5, 1.0, 16)) if cfg.replay_fraction else (-1, None)
        graphs = []
        probes = {"eager": _record_probes(eager), "compiled": _record_probes(compiled)}
        for i in range(updates):
            seen = eager.step(batches[i % 4], fresh, weights), compiled.step(batches[i % 4], fresh, weights)
            graphs.append(counters["stats"]["unique_graphs"])
            keys = ["total_loss", "pg_loss", "baseline_loss", "entropy", "grad_norm", "value_mean", "dead/net_0"]
            keys += ["policy_lag_min", "policy_lag_mean", "policy_lag_max"]
            for key in keys + (["replay_age_mean", "replay_masked_fraction"] if cfg.replay_fraction else []):
                assert abs(seen[0][key] - seen[1][key]) <= tol * (1 + abs(seen[0][key])), (name, i, key, seen)
            last = (fresh if fresh > 0 else 16) - 1  # the policy lag counts fresh columns only
            assert (seen[1]["policy_lag_min"], seen[1]["policy_lag_mean"], seen[1]["policy_lag_max"]) == (i, i + last / 2, i + last), (name, i, seen[1])
        # Compiled at update 1 (update 0 is the eager probe) and never again: no recompiling per update.
        assert graphs[0] == 0 and graphs[1] >= 1 and graphs[-1] == graphs[1], (name, graphs)
        # The replay terms are a deliberate graph break (two graphs around them); Dynamo does not trace nn.LSTM
        # ("Dynamo does not support RNN, GRU, or LSTM"): the core runs eagerly between the graphs around it.
        if name not in ("replay", "lstm"):
            assert graphs[1] == 1, (name, graphs)
        assert compiled.steps == eager.steps == updates and compiled.frames == eager.frames
        # The probe's eager pass costs a compiled learner an uncompiled update, so it comes ten times less often.
        assert probes == {"eager": [0, 10][: 1 + (updates > 10)], "compiled": [0]}, (name, probes)
        assert torch.allclose(compiled.flat, eager.flat, atol=tol / 10), (name, (compiled.flat - eager.flat).abs().max())
        assert torch.allclose(compiled.abs_advantages, eager.abs_advantages, atol=tol, rtol=tol), name


def test_compiled_cnns_update_as_the_eager_ones():
    """The deep ResNet (IMPALA's 15 convolutions) and the shallow CNN on 84x84 images and the small CNN on
    MinAtar's 10x10 grids (the last two take their last ReLU after the flatten when compiled) through --compile-learner: the same metrics as the
    eager learner over the probe update and two compiled ones, compiled once. Small batches (5 x 4: 24 grids,
    enough for the small CNN's learner convolution) keep the eager passes short; the metrics of updates 1 and 2
    also check the weights the updates before left."""
    import numpy as np
    from torch._dynamo.utils import counters

    from pronghorn.models import build_agent

    cnns = (
        ("ALE/Pong-v5", "deep", (4, 84, 84), 6, 4),
        ("ALE/Pong-v5", "shallow", (4, 84, 84), 6, 4),  # compiled, its last ReLU comes after the flatten (models._ConvFC)
        ("MinAtar/Breakout-v0", "small", (4, 10, 10), 3, 1),
    )
    for env, model, obs_shape, actions, frames_per_step in cnns:
        counters.clear()
        torch.manual_seed(0)
        cfg = Config(env=env, model=model, total_frames=10_000).for_observations(obs_shape)
        agent = build_agent(cfg, obs_shape, actions)
        eager = Learner(cfg, copy.deepcopy(agent), frames_per_step=frames_per_step)
        compiled = Learner(dataclasses.replace(cfg, compile_learner=True), copy.deepcopy(agent), frames_per_step=frames_per_step)
        batches = synthetic_batches(3, T=5, B=4, obs_shape=obs_shape, obs_dtype=np.uint8, num_actions=actions)
        if model == "small":
            batches = [b._replace(obs=(b.obs > 200).to(torch.uint8)) for b in batches]  # 0/1 occupancy, as MinAtar's
        for i, batch in enumerate(batches):
            seen = eager.step(batch, -1, None), compiled.step(batch, -1, None)
            for key in ("total_loss", "pg_loss", "baseline_loss", "entropy", "grad_norm", "value_mean"):
                assert abs(seen[0][key] - seen[1][key]) <= 1e-4 * (1 + abs(seen[0][key])), (model, i, key, seen)
        assert counters["stats"]["unique_graphs"] == 1 and compiled.steps == eager.steps == 3, model


def test_compile_learner_without_its_compiler_is_a_clear_error(monkeypatch):
    import pytest
    from torch._inductor import cpp_builder

    from pronghorn import training
    from pronghorn.config_checks import ConfigError

    def missing() -> str:
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", missing)
    cfg = Config(compile_learner=True).for_observations((4,))
    with pytest.raises(ConfigError, match="--compile-learner on CPU needs a C\\+\\+ compiler"):
        training._check_compile(cfg, torch.device("cpu"))
    training._check_compile(dataclasses.replace(cfg, compile_learner=False), torch.device("cpu"))  # off: nothing to check
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # no Triton: checked by name, no GPU needed
    with pytest.raises(ConfigError, match="--compile-learner on CUDA needs Triton"):
        training._check_compile(cfg, torch.device("cuda"))


def test_an_update_leaves_its_batch_as_it_was():
    # Staging hands the learner an actor's slot itself where a batch is one slot (staging.py): a write into
    # the batch would be a write into shared memory an actor refills next. Vector and image observations,
    # standardised, with an LSTM core, and a second (clipped) pass over the same batch.
    for obs_shape, dtype, model in (((4,), np.float32, "mlp"), ((4, 84, 84), np.uint8, "shallow")):
        cfg = Config(model=model, lstm=True, normalize_observations="on", updates_per_batch=2, ppo_clip=0.2).for_observations(obs_shape)
        agent = build_agent(cfg, obs_shape, 6)
        learner = Learner(cfg, agent, frames_per_step=1)
        (batch,) = synthetic_batches(1, T=4, B=2, obs_shape=obs_shape, obs_dtype=dtype, num_actions=6, core_size=agent.core_size)
        before = [t.clone() for t in batch]
        learner.step(batch)
        learner.step(batch, count=False)
        for name, was, now in zip(batch._fields, before, batch):
            assert torch.equal(was, now), (model, name)


def test_on_cpu_v_trace_reads_the_behaviour_logits_from_an_action_major_copy(monkeypatch):
    # Learner._action_major: V-trace gets the slot's behaviour logits as a view of an [A, T+1, B] copy (each
    # action's logits one contiguous row, like the learner's own on CPU), the same values, the slot untouched.
    from pronghorn import vtrace

    seen = []
    real = vtrace.from_logits

    def recording(behaviour_policy_logits, *args, **kwargs):
        seen.append(behaviour_policy_logits.clone())
        seen.append(behaviour_policy_logits.stride())
        return real(behaviour_policy_logits, *args, **kwargs)

    monkeypatch.setattr(vtrace, "from_logits", recording)
    learner = Learner(Config(total_frames=10_000).for_observations((4,)), Agent((4,), 3), frames_per_step=1)
    for batch in synthetic_batches(2, T=5, B=7, num_actions=3):
        slot = batch.policy_logits.clone()
        learner.step(batch)
        values, strides = seen[-2:]
        assert strides == (7, 1, 6 * 7)  # [T, B, A] over [A, T+1, B]: a step's columns, then each action's row
        assert torch.equal(values, slot[:-1])
        assert torch.equal(batch.policy_logits, slot) and batch.policy_logits.is_contiguous()
