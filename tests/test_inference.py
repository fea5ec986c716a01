"""--inference central: the server answers as each actor's own agent would, survives dead actors, and learns."""

import dataclasses
import os
import queue
import signal
import threading
import time
from multiprocessing import Pipe

import numpy as np
import pytest
import torch

import tests.flaky_env  # noqa: F401  (registers ShortCartPole-v0: a time limit every 5 steps)
from pronghorn.actor import run_actor
from pronghorn.config import Config, ConfigError
from pronghorn.envs import probe
from pronghorn.flat import load_flat
from pronghorn.models import build_agent
from pronghorn.records import Unroll, unroll_spec, zeros_unroll
from pronghorn.runtime import LocalRuntime
from pronghorn.runtime.inference import InferenceClient, InferenceServer, SharedMailbox
from pronghorn.runtime.shm import new_token
from tests.helpers import assert_no_leaks, read_csv, run_cli


class _FixedWeights:
    """A WeightSource that always serves the same weights (version 7)."""

    version = 7

    def __init__(self, agent):
        self.flat = torch.nn.utils.parameters_to_vector(agent.parameters()).detach().clone()

    def load_into(self, model, timeout):
        load_flat(list(model.parameters()), self.flat)  # in place, as a WeightSource must (the acting step keeps views)
        return self.version

    def load_version(self, model, version, timeout):
        return self.load_into(model, timeout)


class _Slots:
    """Hands out slot indices 0..n-1 once, then None (run_actor returns); keeps a copy of every full slot."""

    def __init__(self, layout, n):
        self.slots = [zeros_unroll(layout) for _ in range(n)]
        self._free = list(range(n))
        self.full = []

    def get(self):
        return self._free.pop(0) if self._free else None

    def put(self, index):
        self.full.append(Unroll(*(t.clone() for t in self.slots[index])))


def _unrolls(cfg, spec, weights, index, policy=None, n=4):
    layout = unroll_spec(cfg.unroll_length, cfg.envs, spec.obs_shape, spec.obs_dtype, spec.num_actions, 64 if cfg.lstm else 0)
    slots = _Slots(layout, n)
    run_actor(index, cfg, spec, slots.slots, slots, slots, weights, np.zeros(3, np.int64), lambda: False, policy)
    return slots.full


@pytest.mark.parametrize("lstm", [False, True], ids=["mlp", "lstm"])
def test_central_answers_equal_the_actors_own_agent_across_unrolls_and_episode_starts(lstm):
    # ShortCartPole truncates every 5 steps (or terminates): episode starts and V(final_obs) inside every unroll.
    cfg = Config(env="ShortCartPole-v0", num_actors=2, envs_per_actor=3, unroll_length=7, batch_size=3, lstm=lstm, hidden_size=64)
    cfg = cfg.for_observations((4,))
    spec = probe(cfg.env, cfg)
    torch.manual_seed(0)
    weights = _FixedWeights(build_agent(cfg, spec.obs_shape, spec.num_actions))
    own = {i: _unrolls(cfg, spec, weights, i) for i in range(2)}

    mailbox = SharedMailbox.create(new_token(), cfg, spec, 64 if lstm else 0)
    # A long max wait: both actors' steps are answered in one batch, so batching itself is what is compared.
    server = InferenceServer(dataclasses.replace(cfg, inference_max_wait_ms=200.0), spec, weights, mailbox.box, torch.device("cpu"))
    central, clients = {}, []
    for i in range(2):
        server_end, actor_end = Pipe()
        server.connect(i, server_end)
        clients.append(InferenceClient(i, mailbox, actor_end, lambda: False, 30.0))
    server.start()
    try:
        threads = [threading.Thread(target=lambda i=i: central.__setitem__(i, _unrolls(cfg, spec, weights, i, clients[i]))) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        stats = server.metrics()
    finally:
        server.close()
        clients.clear()
        mailbox.release()
    assert server.error is None
    assert stats["inference_batch_envs"] > cfg.envs  # the two actors were answered together
    for i in range(2):
        assert len(central[i]) == len(own[i]) == 4
        for a, b in zip(own[i], central[i]):
            assert a.truncated.any() and a.terminated[1:].any() | a.truncated[1:].any()
            for name in ("obs", "action", "last_action", "reward", "terminated", "truncated", "policy_version"):
                assert torch.equal(getattr(a, name), getattr(b, name)), name
            torch.testing.assert_close(a.policy_logits, b.policy_logits)
            torch.testing.assert_close(a.truncation_value, b.truncation_value)
            torch.testing.assert_close(a.core_state, b.core_state)  # the LSTM state carried into each unroll
        if lstm:
            assert any(u.core_state.abs().sum() > 0 for u in own[i][1:])


def test_central_inference_refuses_what_it_cannot_do(monkeypatch):
    with pytest.raises(ConfigError, match="--deterministic needs --inference actor"):
        Config(inference="central", deterministic=True)
    with pytest.raises(ConfigError, match="--inference central runs with --runtime local"):
        Config(inference="central", runtime="ray")
    with pytest.raises(ConfigError, match="--inference-max-wait-ms"):
        Config(inference_max_wait_ms=-1)
    assert Config().for_observations((4,)).inference == "actor" or torch.cuda.is_available()
    assert Config(device="cpu", model="deep").for_observations((4, 84, 84)).inference == "actor"  # measured 1.02-1.09x faster on CPU
    assert Config(device="cpu", lstm=True).for_observations((4, 84, 84)).inference == "actor"  # the shallow CNN + LSTM: actors measured faster
    assert Config(device="cpu", lstm=True).for_observations((4,)).inference == "actor"  # the MLP's own copy is cheaper than the round trip
    assert Config(device="cpu", model="deep", deterministic=True).for_observations((4, 84, 84)).inference == "actor"
    monkeypatch.setattr("pronghorn.defaults._cuda_available", lambda: True)  # a learner with CUDA batches every model there
    assert Config(model="deep").for_observations((4, 84, 84)).inference == "central"
    assert Config().for_observations((4,)).inference == "central"
    assert Config(deterministic=True).for_observations((4,)).inference == "actor"


def test_actors_yield_the_cores_to_the_learner_unless_the_server_waits_on_them(monkeypatch):
    assert Config(device="cpu").for_observations((4,)).actor_nice == 10  # actor inference: the learner goes first
    assert Config(device="cpu", model="deep").for_observations((4, 84, 84)).actor_nice == 10  # actor inference on CPU, whatever the model
    monkeypatch.setattr("pronghorn.defaults._cuda_available", lambda: True)
    assert Config(model="deep").for_observations((4, 84, 84)).actor_nice == 0  # auto chose central
    assert Config(inference="central").for_observations((4,)).actor_nice == 0
    assert Config(inference="central", actor_nice=5).for_observations((4,)).actor_nice == 5  # a flag given is kept
    with pytest.raises(ConfigError, match="--actor-nice is 20: use a niceness from 0"):
        Config(actor_nice=20)


@pytest.mark.serial  # the gather bound is wall-clock: another test's training on the same cores would blur it
def test_a_killed_actor_is_replaced_and_the_server_does_not_wait_for_it():
    cfg = Config(num_actors=2, envs_per_actor=4, unroll_length=5, batch_size=4, inference="central", inference_max_wait_ms=5.0).for_observations((4,))
    spec = probe(cfg.env, cfg)
    agent = build_agent(cfg, spec.obs_shape, spec.num_actions)
    rt = LocalRuntime(cfg, spec, sum(p.numel() for p in agent.parameters()), agent.core_size, torch.device("cpu"))
    try:
        rt.weights.publish(agent, 0)
        rt.start()
        for _ in range(10):
            rt.router.put(rt.router.get(timeout=60))
        rt.server.metrics()
        victim = rt.actors[0].pid
        os.kill(victim, signal.SIGKILL)
        before = rt.counters.row(0)[1]
        served, deadline = 0, time.monotonic() + 60
        while (rt.restarts == 0 or rt.counters.row(0)[1] <= before + 2 or served < 20) and time.monotonic() < deadline:
            rt.router.put(rt.router.get(timeout=60))
            assert rt.router.accounted() == rt.num_slots
            served += 1
        rt.check_health()
        stats = rt.server.metrics()
        assert rt.restarts == 1 and rt.actors[0].pid != victim and rt.actors[0].is_alive()
        assert rt.counters.row(0)[1] > before + 2  # the replacement is answered by the server and delivers
        # The gather bound held while actor 0 was dead and after: 5 ms, plus scheduling on 2 busy cores while this
        # process spawns the replacement (5-8 ms in all here, once 34 ms in a fresh-clone CI run). A gather that
        # waited for the dead actor would last until its replacement's first request, which comes after a new
        # process has imported torch and pronghorn (1.3 s here), so 50 ms still tells the two apart.
        assert stats["inference_gather_ms_max"] < 5.0 + 45.0
    finally:
        rt.close()
    assert_no_leaks()


def test_cartpole_learns_with_central_inference(tmp_path):
    logdir = tmp_path / "central"
    proc, out, err = run_cli(["train", "--env", "CartPole-v1", "--inference", "central", "--total-frames", "500k", "--logdir", str(logdir), "--no-progress"])
    assert proc.returncode == 0, err[-2000:]
    assert "solved" in out
    rows = read_csv(logdir / "metrics.csv")
    assert float(rows[-1]["mean_return_100"]) >= 475
    batch = [float(r["inference_batch_envs"]) for r in rows]
    assert max(batch) > 16  # both actors' 16 envs answered together
    assert all(float(r["policy_lag_mean"]) < 10 for r in rows[1:])
    assert_no_leaks(owners=(proc.pid,))


def test_client_gives_up_when_training_stops():
    cfg = Config(num_actors=1, envs_per_actor=2).for_observations((4,))
    spec = probe(cfg.env, cfg)
    mailbox = SharedMailbox.create(new_token(), cfg, spec, 0)
    _server_end, actor_end = Pipe()
    stop = queue.Queue()
    stop.put(True)
    client = InferenceClient(0, mailbox, actor_end, lambda: not stop.empty(), 30.0)
    env_out = type("E", (), dict(obs=np.zeros((2, 4), np.float32), reward=np.zeros(2, np.float32), terminated=np.zeros(2, bool), truncated=np.zeros(2, bool)))
    try:
        with pytest.raises(InterruptedError):
            client.answer(env_out, np.zeros(2, np.int64))
    finally:
        del client
        mailbox.release()
