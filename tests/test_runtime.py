"""Shared memory, weight publishing and the actor processes, with real processes and real /dev/shm."""

import collections
import multiprocessing as mp
import os
import queue
import time

import numpy as np
import pytest
import torch

from pronghorn.config import Config
from pronghorn.envs import probe
from pronghorn.models import Agent
from pronghorn.records import Unroll, unroll_spec
from pronghorn.runtime import LocalRuntime, WorkerError
from pronghorn.runtime.router import PipeSink, PipeSource, SlotRouter
from pronghorn.runtime.shm import SlotArray, WeightStore, new_token
from pronghorn.staging import Staging
from tests.helpers import assert_no_leaks


def _child_writes(handles, value):
    slots = SlotArray.attach(handles)
    slots.slots[1].reward.fill_(value)
    slots.slots[1].obs[0, 0, 0] = 7
    slots.release()


def test_slot_written_in_a_child_process_is_seen_by_the_parent():
    spec = unroll_spec(3, 2, (4,), np.float32, 2, 0)
    slots = SlotArray.create(new_token(), 3, spec)
    try:
        p = mp.get_context("spawn").Process(target=_child_writes, args=(slots.handles, 2.5))
        p.start()
        p.join(30)
        assert p.exitcode == 0
        assert torch.all(slots.slots[1].reward == 2.5) and torch.all(slots.slots[0].reward == 0)
        assert slots.slots[1].obs[0, 0, 0] == 7
        assert slots.slots[1].obs.shape == (4, 2, 4) and slots.slots[1].core_state.shape == (2, 2, 1)
    finally:
        slots.release()
    assert_no_leaks()


def test_a_weights_reader_that_meets_a_write_waits_for_it_and_takes_the_finished_weights():
    """The seqlock's reader retries while the learner writes (first at once, then sleeping between tries) and
    returns the version the write completes, never a half-written copy; a write that never ends times out."""
    import threading

    a, b, c = Agent((4,), 2), Agent((4,), 2), Agent((4,), 2)
    store = WeightStore.create(new_token(), sum(p.numel() for p in a.parameters()))
    try:
        store.publish(a, 1)
        store._seq[0] += 1  # odd: a write in progress, as `publish` leaves it while it copies
        got = []
        reader = threading.Thread(target=lambda: got.append(store.load_into(b, timeout=5.0)))
        reader.start()
        time.sleep(0.05)  # past the reader's spin: it now sleeps between tries
        assert reader.is_alive() and not got
        # The write completes as `publish` completes one: other weights into version 2's buffer, then the
        # version, then seq even again.
        store._buffers[0].copy_(torch.cat([p.detach().reshape(-1) for p in c.parameters()]))
        store._version[0] = 2
        store._seq[0] += 1
        reader.join(5)
        assert got == [2]
        for pc, pb in zip(c.parameters(), b.parameters()):
            assert torch.equal(pc, pb)
        store._seq[0] += 1
        with pytest.raises(TimeoutError, match="consistent weights"):
            store.load_into(b, timeout=0.05)
    finally:
        store.release()


def test_weight_store_round_trip_and_version():
    a, b = Agent((4,), 2), Agent((4,), 2)
    store = WeightStore.create(new_token(), sum(p.numel() for p in a.parameters()))
    try:
        with pytest.raises(TimeoutError, match="publish"):
            store.load_into(b, timeout=0.05)  # nothing published yet
        store.publish(a, 3)
        assert store.load_into(b, timeout=1.0) == 3
        for pa, pb in zip(a.parameters(), b.parameters()):
            assert torch.equal(pa, pb)
    finally:
        store.release()


def test_weights_are_published_from_a_flat_learner_and_loaded_in_place():
    """The learner's parameters are views of one tensor (flat.py); every WeightSource copies into the
    actors' parameters in place, so views of them that the acting step keeps stay valid."""
    from pronghorn.flat import flatten_parameters
    from pronghorn.runtime.ray_actor import _LocalWeights

    learner_agent, actor_agent = Agent((4,), 2), Agent((4,), 2)
    flat = flatten_parameters(learner_agent)
    pointers = [p.data_ptr() for p in actor_agent.parameters()]
    store = WeightStore.create(new_token(), flat.numel())
    try:
        store.publish(learner_agent, 1)
        assert store.load_into(actor_agent, timeout=1.0) == 1
    finally:
        store.release()
    ray_side = _LocalWeights()
    ray_side.offer(flat.detach().numpy() * 2, 2)
    ray_agent = Agent((4,), 2)
    ray_pointers = [p.data_ptr() for p in ray_agent.parameters()]
    assert ray_side.load_into(ray_agent, timeout=1.0) == 2
    for p, q, r in zip(learner_agent.parameters(), actor_agent.parameters(), ray_agent.parameters()):
        assert torch.equal(p, q) and torch.equal(2 * p, r)
    assert [p.data_ptr() for p in actor_agent.parameters()] == pointers
    assert [p.data_ptr() for p in ray_agent.parameters()] == ray_pointers


def test_a_ray_actor_keeps_the_newest_weights_and_long_unrolls_get_their_second_request_late():
    """The K requests in flight reach a Ray actor on several threads, in any order: an older version arriving
    after a newer one is ignored, and what loads is one version's number with that version's values. The pump
    sends an actor's second request (queued behind the unroll it is making) a quarter of an unroll, or the slack,
    before the actor will need it where unrolls take LATE_REQUEST_MIN_PERIOD or longer, so that its weights are
    newer; at once where they are shorter, or not yet timed."""
    from pronghorn.runtime.ray_actor import _LocalWeights
    from pronghorn.runtime.ray_runtime import LATE_REQUEST_MIN_PERIOD, LATE_REQUEST_SLACK, second_request_due

    agent = Agent((4,), 2)
    size = sum(p.numel() for p in agent.parameters())
    weights = _LocalWeights()
    weights.offer(np.full(size, 3.0, np.float32), 3)
    weights.offer(np.full(size, 2.0, np.float32), 2)  # late: a request sent before the one that brought version 3
    assert weights.version == 3 and weights.load_into(agent, timeout=1.0) == 3
    assert all(bool((p == 3.0).all()) for p in agent.parameters())

    long = 40 * LATE_REQUEST_SLACK
    assert not second_request_due(now=10.0, period=long, arrived=10.0 - 0.7 * long)  # more than a quarter of it still to go
    assert second_request_due(now=10.0, period=long, arrived=10.0 - 0.8 * long)
    near = LATE_REQUEST_MIN_PERIOD  # a quarter of it is less than the slack: sent the slack before the end
    assert not second_request_due(now=10.0, period=near, arrived=10.0 - (near - LATE_REQUEST_SLACK) + 1e-3)
    assert second_request_due(now=10.0, period=near, arrived=10.0 - (near - LATE_REQUEST_SLACK) - 1e-3)
    assert second_request_due(now=10.0, period=LATE_REQUEST_MIN_PERIOD / 2, arrived=10.0)  # short unrolls: at once
    assert second_request_due(now=10.0, period=0.0, arrived=0.0)  # no unroll timed yet


def test_weights_published_from_the_learner_s_flat_tensor_reach_an_actor_s_flat_holder():
    """The learner publishes its one flat tensor without walking the modules, and an actor loads into a holder of
    its own flat tensor (flat_holder): each update's weights arrive whole, and the actor's parameters stay the same
    tensors (the acting step's views of them stay valid)."""
    from pronghorn.flat import flat_holder, flatten_parameters
    from pronghorn.runtime.ray_runtime import _Weights

    learner_agent, actor_agent = Agent((4,), 2), Agent((4,), 2)
    flat = flatten_parameters(learner_agent)
    holder = flat_holder(actor_agent)
    pointers = [p.data_ptr() for p in actor_agent.parameters()]
    store = WeightStore.create(new_token(), flat.numel())
    try:
        for version in (1, 2):
            store.publish(learner_agent, version, flat=flat)
            assert store.load_into(holder, timeout=1.0) == version
            for p, q in zip(learner_agent.parameters(), actor_agent.parameters()):
                assert torch.equal(p, q)
            with torch.no_grad():
                flat.mul_(3.0)  # the next update changes the learner's weights in place
    finally:
        store.release()
    assert [p.data_ptr() for p in actor_agent.parameters()] == pointers
    ray_side = _Weights()
    ray_side.publish(learner_agent, 5, flat=flat)
    at_publish = flat.detach().clone()
    with torch.no_grad():
        flat.add_(1.0)  # an update after publishing must not change what was published
    version, published = ray_side.current()
    assert version == 5 and np.array_equal(published, at_publish.numpy())


def _fake_slots(n, T=2, E=2):
    spec = unroll_spec(T, E, (3,), np.float32, 2, 0)
    return [Unroll(*(torch.full(shape, float(i)).to(torch.from_numpy(np.zeros(0, dtype)).dtype) for shape, dtype in spec)) for i in range(n)]


def test_staging_hands_slots_back_only_after_copying_and_never_overwrites_the_batch_in_use():
    slots = _fake_slots(6)
    full, free = queue.Queue(), queue.Queue()
    for i in range(4):
        full.put(i)
    staging = Staging(slots, full, free, batch_slots=2, device=torch.device("cpu"), timeout=5, health_check=lambda: None, describe_producers=lambda: "test")
    assert staging.threaded is False  # CPU, no replay: batches are assembled when asked for
    staging.close()
    staging = Staging(
        slots, full, free, batch_slots=2, device=torch.device("cpu"), timeout=5, health_check=lambda: None, describe_producers=lambda: "test", threaded=True
    )
    try:
        first = staging.next()
        # Time-major: slots are concatenated along the env dim (dim 1).
        assert first.data.obs.shape == (3, 4, 3)
        assert torch.all(first.data.obs[:, :2] == 0) and torch.all(first.data.obs[:, 2:] == 1)
        deadline = time.monotonic() + 5
        while free.qsize() < 4 and time.monotonic() < deadline:  # the second batch gets staged meanwhile
            time.sleep(0.01)
        assert sorted(free.queue) == [0, 1, 2, 3]
        slots[0].obs.fill_(99.0)  # an actor reuses a returned slot...
        assert torch.all(first.data.obs[:, :2] == 0)  # ...the batch in use is a copy, untouched
        second = staging.next()
        assert torch.all(second.data.obs[:, :2] == 2) and torch.all(second.data.obs[:, 2:] == 3)
        assert second.data.obs.data_ptr() != first.data.obs.data_ptr()  # two alternating buffers
    finally:
        staging.close()


def test_staging_without_a_thread_copies_when_asked_and_hands_slots_back_at_once():
    slots = _fake_slots(6)
    full, free = queue.Queue(), queue.Queue()
    for i in (3, 1, 4, 5):
        full.put(i)
    staging = Staging(slots, full, free, batch_slots=2, device=torch.device("cpu"), timeout=5, health_check=lambda: None, describe_producers=lambda: "test")
    try:
        first = staging.next()
        assert torch.all(first.data.obs[:, :2] == 3) and torch.all(first.data.obs[:, 2:] == 1)  # in arrival order
        assert sorted(free.queue) == [1, 3] and full.qsize() == 2  # copied, handed back; nothing taken ahead
        slots[3].obs.fill_(99.0)  # an actor reuses a returned slot...
        assert torch.all(first.data.obs[:, :2] == 3)  # ...the batch in use is a copy, untouched
        second = staging.next()
        assert torch.all(second.data.obs[:, :2] == 4) and torch.all(second.data.obs[:, 2:] == 5)
        assert sorted(free.queue) == [1, 3, 4, 5] and [second.number, first.number] == [1, 0]
    finally:
        staging.close()


def test_staging_trains_on_a_lone_slot_itself_and_hands_it_back_only_when_the_next_batch_is_asked_for():
    slots = _fake_slots(4)
    full, free = queue.Queue(), queue.Queue()
    for i in (2, 0):
        full.put(i)
    staging = Staging(slots, full, free, batch_slots=1, device=torch.device("cpu"), timeout=5, health_check=lambda: None, describe_producers=lambda: "test")
    try:
        assert staging._host == []  # no batch buffer to copy into
        first = staging.next()
        assert first.data.obs.data_ptr() == slots[2].obs.data_ptr()  # the slot itself: no copy
        assert free.qsize() == 0  # still the learner's while it trains on it
        second = staging.next()
        assert list(free.queue) == [2]  # asking for the next batch hands the previous slot back
        assert second.data.obs.data_ptr() == slots[0].obs.data_ptr() and torch.all(second.data.obs == 0)
        assert [second.number, second.stage_s] == [1, 0.0]
    finally:
        staging.close()
    # With a device copy or replay the lone slot is still copied (threaded staging): the batch is not the slot.
    full.put(3)
    staging = Staging(
        slots, full, free, batch_slots=1, device=torch.device("cpu"), timeout=5, health_check=lambda: None, describe_producers=lambda: "test", threaded=True
    )
    try:
        third = staging.next()
        assert third.data.obs.data_ptr() != slots[3].obs.data_ptr() and torch.all(third.data.obs == 3)
    finally:
        staging.close()


def test_staging_times_out_with_a_message_naming_what_it_waited_for():
    staging = Staging(
        _fake_slots(2),
        queue.Queue(),
        queue.Queue(),
        1,
        torch.device("cpu"),
        timeout=1.0,
        health_check=lambda: None,
        describe_producers=lambda: "0/2 actors alive",
    )
    try:
        with pytest.raises(TimeoutError, match=r"learner waited \d+ s for data: 0/2 actors alive"):
            staging.next()
    finally:
        staging.close()


def _runtime(cfg):
    cfg = cfg.for_observations((4,))
    spec = probe(cfg.env, cfg)
    agent = Agent(spec.obs_shape, spec.num_actions)
    rt = LocalRuntime(cfg, spec, sum(p.numel() for p in agent.parameters()), agent.core_size)
    rt.weights.publish(agent, 0)
    return rt


def test_actors_fill_slots_and_close_leaves_nothing_behind():
    rt = _runtime(Config(num_actors=2, envs_per_actor=4, unroll_length=5, batch_size=4))
    try:
        rt.start()
        seen = [rt.router.get(timeout=60) for _ in range(4)]
        slot = rt.unroll_slots()[seen[0]]
        # Row 0 of each later unroll repeats the previous unroll's last row; actions index logits.
        assert slot.obs.shape == (6, 4, 4) and torch.all(slot.action < 2) and torch.all(slot.level == 0)
        assert torch.all(slot.policy_version == 0)
        assert len(rt.actors) == 2 and rt.alive() == 2
        rt.check_health()
    finally:
        rt.close()
    assert_no_leaks()


def test_an_actor_that_cannot_recover_stops_training_with_its_level_named():
    rt = _runtime(Config(env="tests.flaky_env:BrokenReset-v0", num_actors=1, envs_per_actor=2, batch_size=2))
    try:
        rt.start()
        deadline = time.monotonic() + 60
        with pytest.raises(WorkerError, match=r"actor 0 \(tests.flaky_env:BrokenReset-v0\) failed: RuntimeError: env 0"):
            while time.monotonic() < deadline:
                rt.check_health()
                time.sleep(0.1)
    finally:
        rt.close()
    assert_no_leaks()


def test_the_router_never_writes_to_a_dead_actor_and_gets_every_slot_back():
    """A freed slot offered to an actor that died unnoticed (BrokenPipeError in CI's crash-loop test) stays free."""
    router = SlotRouter(num_slots=4, num_actors=1, depth=2)
    free_recv, free_send = mp.Pipe(duplex=False)
    full_recv, full_send = mp.Pipe(duplex=False)
    death_r, death_w = os.pipe()  # stands in for the process sentinel: readable once the "process" ends
    deaths = []
    router.on_death = lambda i: (deaths.append(router.reclaim(i)), os.close(death_r))
    router.connect(0, free_send, full_recv, death_r)
    source = PipeSource(free_recv, lambda: False, timeout=5, who="actor 0")
    first, second = source.get(), source.get()
    PipeSink(full_send).put(first)  # it finishes one unroll...
    for conn in (free_recv, full_send):
        conn.close()  # ...and dies holding `second`
    assert router.get(timeout=5) == first
    router.put(first)  # offers the freed slot to the dead actor: must neither raise nor lose it
    assert router.accounted() == 4
    os.close(death_w)
    with pytest.raises(queue.Empty):
        router.get(timeout=0.5)
    assert deaths == [[second]]
    assert sorted(router.free) == [0, 1, 2, 3] and router.accounted() == 4
    router.close()


def test_the_router_resupplies_an_actor_whose_unroll_arrives_while_another_is_ready():
    """get() takes in every finished unroll, even with a slot already ready, and hands its actor the free slot:
    an actor that used up the slot queued in its pipe must not wait until the learner runs out of ready slots."""
    router = SlotRouter(num_slots=6, num_actors=2, depth=2)
    ends = []
    for i in range(2):
        free_recv, free_send = mp.Pipe(duplex=False)
        full_recv, full_send = mp.Pipe(duplex=False)
        r, w = os.pipe()  # stands in for the process sentinel; never readable here
        router.connect(i, free_send, full_recv, r)  # hands actor i two slots
        ends.append((PipeSource(free_recv, lambda: False, timeout=5, who=f"actor {i}"), PipeSink(full_send), free_recv, full_send, r, w))
    (source0, sink0, *_), (source1, sink1, *_) = ends
    sink0.put(source0.get())
    sink1.put(c := source1.get())
    a = router.get(timeout=5)  # takes both in and hands each actor a third slot: none is free now
    assert router.ready_by[1] == collections.deque([c]) and not router.free
    finished = []
    for _ in range(2):  # actor 0 fills the two slots queued in its pipe and sends them: its pipe is empty
        finished.append(source0.get())
        sink0.put(finished[-1])
    assert not source0._poll.poll(0)
    router.put(a)  # the learner frees `a`; as far as the router has heard, actor 0 still holds two slots
    assert router.get(timeout=5) == c  # ready at once; actor 0's two unrolls are taken in on the way
    assert router.ready_by[0] == collections.deque(finished)
    assert source0.get() == a, "actor 0 was not handed the free slot for the unrolls it finished"
    assert router.accounted() == 6
    router.close()
    for *_, free_recv, full_send, r, w in ends:
        free_recv.close()
        full_send.close()
        os.close(r)
        os.close(w)


def _threads_after_limit(result) -> None:
    import torch
    from threadpoolctl import threadpool_info

    from pronghorn.runtime.tuning import limit_threads

    before = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    openmp_before = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"]
    limit_threads(torch.get_num_threads())  # the learner's case: torch keeps its threads
    after = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    openmp = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"]
    limit_threads(1)  # the actors' case
    result.put((before, after, openmp_before, openmp, torch.get_num_threads()))


def test_limit_threads_caps_numpy_s_blas_at_one_thread_and_sets_torch_s_as_asked():
    """Every process calls it (actors 1, the learner its share): the MLP's acting step multiplies in numpy,
    whose OpenBLAS would otherwise split a product of an actor's 512 envs over both cores."""
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    child = ctx.Process(target=_threads_after_limit, args=(result,))
    child.start()
    before, after, openmp_before, openmp, torch_threads = result.get(timeout=60)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert before and after == [1] * len(before)  # numpy's BLAS was found and limited
    assert openmp == openmp_before and all(n == (os.cpu_count() or 1) for n in openmp)  # torch's OpenMP pool keeps its size
    assert torch_threads == 1


def test_the_deep_resnet_s_learner_takes_a_second_thread_on_cpu_and_the_others_keep_the_cores_left():
    from pronghorn.runtime.tuning import learner_thread_count

    pong = dict(env="ALE/Pong-v5")
    deep = Config(**pong, model="deep")
    assert learner_thread_count(deep, on_cpu=True, cores=2) == 2  # shares a core with an actor: it still pays
    assert learner_thread_count(deep, on_cpu=True, cores=16) == 14  # the cores the actors leave are more
    assert learner_thread_count(deep, on_cpu=False, cores=2) == 1  # the update runs on the accelerator
    assert learner_thread_count(Config(**pong, model="shallow"), on_cpu=True, cores=2) == 1
    assert learner_thread_count(Config(**pong, model="shallow"), on_cpu=True, cores=8) == 6
    assert learner_thread_count(Config(**pong, model="deep", deterministic=True), on_cpu=True, cores=2) == 1
    assert learner_thread_count(Config(**pong, model="shallow", learner_threads=3), on_cpu=True, cores=2) == 3


def test_openmp_sleeps_only_where_the_learner_s_threads_share_cores_with_actors_and_a_set_policy_wins():
    from pronghorn.runtime.tuning import quiet_openmp

    pong = dict(env="ALE/Pong-v5")
    env: dict[str, str] = {}
    assert quiet_openmp(Config(**pong, model="deep"), 2, env) and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    for cfg, cores in ((Config(**pong, model="shallow"), 2), (Config(**pong, model="deep"), 16)):
        env = {}
        assert not quiet_openmp(cfg, cores, env) and env == {}  # one learner thread, or a core for each
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert not quiet_openmp(Config(**pong, model="deep"), 2, env) and env == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_pronghorn_train_sets_openmp_s_policy_before_torch_loads():
    """libgomp reads OMP_WAIT_POLICY once, when torch loads it: set later, it would change nothing."""
    import subprocess
    import sys

    from tests.helpers import ENV

    code = (
        "import os, sys\n"
        "from pronghorn import cli\n"
        "from pronghorn.runtime import tuning\n"
        "real = tuning.quiet_openmp\n"
        "def stop_after(cfg, cores):\n"
        "    set_it = real(cfg, cores)\n"
        "    print(cfg.model, set_it, os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)\n"
        "    raise SystemExit(0)\n"
        "tuning.quiet_openmp = stop_after\n"
        "for model in ('shallow', 'deep'):\n"
        "    try:\n"
        "        cli.main(['train', '--env', 'ALE/Pong-v5', '--model', model, '--num-actors', '2'])\n"
        "    except SystemExit:\n"
        "        pass\n"
    )
    env = {k: v for k, v in ENV.items() if k != "OMP_WAIT_POLICY"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    expected_deep = "deep True PASSIVE False" if (os.cpu_count() or 1) <= 3 else "deep False None False"
    assert proc.stdout.splitlines() == ["shallow False None False", expected_deep], proc.stderr


def test_pin_actors_auto_pins_where_the_envs_step_on_a_worker_thread_and_never_more_actors_than_cores():
    from pronghorn.runtime.tuning import actor_core

    cores = sorted(os.sched_getaffinity(0))
    pong, envpool, cartpole = Config(env="ALE/Pong-v5", num_actors=1), Config(env="ALE/Pong-v5", env_backend="envpool", num_actors=1), Config(num_actors=1)
    assert pong.backend == "vector" and envpool.backend == "envpool" and cartpole.backend == "vector"
    assert [actor_core(pong, i, ["ALE/Pong-v5"]) for i in range(3)] == [cores[i % len(cores)] for i in range(3)]
    assert actor_core(envpool, 1, ["ALE/Pong-v5"]) == cores[1 % len(cores)]
    assert actor_core(cartpole, 0, ["CartPole-v1"]) is None  # its vector env steps in the actor's own thread
    assert actor_core(Config(env="ALE/Pong-v5", num_actors=len(cores) + 1), 0, ["ALE/Pong-v5"]) is None  # more actors than cores
    assert actor_core(Config(env="ALE/Pong-v5", num_actors=1, pin_actors="off"), 0, ["ALE/Pong-v5"]) is None
    assert actor_core(Config(num_actors=1, pin_actors="on"), 1, ["CartPole-v1"]) == cores[1 % len(cores)]


def test_pinned_actor_processes_run_on_their_own_core_and_unpinned_ones_anywhere(tmp_path):
    import signal
    import subprocess

    import psutil

    from tests.helpers import ENV, train_command, worker_processes

    cores = sorted(os.sched_getaffinity(0))
    for mode, expected in (("on", lambda i: [cores[i % len(cores)]]), ("off", lambda i: cores)):
        proc = subprocess.Popen(
            train_command(tmp_path / mode, "--num-actors", "2", "--pin-actors", mode, "--total-frames", "100M"),
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        found: dict[int, list[int]] = {}
        try:
            deadline = time.monotonic() + 120
            while len(found) < 2 and time.monotonic() < deadline and proc.poll() is None:
                for p in worker_processes((proc.pid,)):
                    try:
                        title = p.cmdline()[0].split()[0]
                        if title.startswith("pronghorn-actor-"):  # titled after _actor_main pins it
                            found[int(title.rsplit("-", 1)[1])] = sorted(p.cpu_affinity())
                    except (psutil.NoSuchProcess, IndexError, ValueError):
                        pass
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGTERM)  # as Ctrl-C: checkpoint, stop the actors, exit
            proc.wait(timeout=120)
        assert found == {i: expected(i) for i in range(2)}, mode
    assert_no_leaks()
