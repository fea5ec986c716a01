"""Actor processes that die (SIGKILL, a crash in native env code) are replaced; no slot is lost.

The learner killed and resumed is tested in tests/test_checkpoint.py (SIGKILL of the whole group)."""

import os
import signal
import time

import psutil

from pronghorn.config import Config
from pronghorn.envs import probe
from pronghorn.models import Agent
from pronghorn.runtime import LocalRuntime
from tests.helpers import assert_no_leaks, read_csv, run_cli, start_training, wait_for_file


def test_killed_actor_is_replaced_and_its_slots_reclaimed():
    cfg = Config(num_actors=2, envs_per_actor=4, unroll_length=5, batch_size=4, actor_nice=7).for_observations((4,))
    below_us = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 7)  # the actors yield the cores to the learner (this process)
    spec = probe(cfg.env, cfg)
    agent = Agent(spec.obs_shape, spec.num_actions)
    rt = LocalRuntime(cfg, spec, sum(p.numel() for p in agent.parameters()), agent.core_size)
    try:
        rt.weights.publish(agent, 0)
        rt.start()
        served = 0
        while served < 6 or min(rt.counters.row(i)[1] for i in range(2)) == 0:  # until both actors have made an unroll
            rt.router.put(rt.router.get(timeout=60))
            served += 1
        assert [psutil.Process(a.pid).nice() for a in rt.actors] == [below_us, below_us]
        victim = rt.actors[0].pid
        os.kill(victim, signal.SIGKILL)
        served = 0
        deadline = time.monotonic() + 60
        while (rt.restarts == 0 or served < 20) and time.monotonic() < deadline:
            slot = rt.router.get(timeout=60)
            assert rt.router.accounted() == rt.num_slots  # every slot is somewhere known, at every step
            rt.router.put(slot)
            served += 1
        assert rt.restarts == 1 and rt.actors[0].pid != victim and rt.actors[0].is_alive()
        assert _actor_pids(os.getpid()) == [rt.actors[0].pid]  # its title is set after its niceness
        assert psutil.Process(rt.actors[0].pid).nice() == below_us  # the replacement yields too
        assert rt.router.accounted() == rt.num_slots
        assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == psutil.STATUS_ZOMBIE
    finally:
        rt.close()
    assert_no_leaks()


def _actor_pids(parent: int, timeout: float = 30.0) -> list[int]:
    """Children titled pronghorn-actor-0, polled until one shows up.

    Each child is read on its own: one zombie or vanished child (a finished probe) raises NoSuchProcess,
    which must not hide the actor beside it (seen once in CI)."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        try:
            children = psutil.Process(parent).children()
        except psutil.NoSuchProcess:
            return []
        for child in children:
            try:
                if (child.cmdline() or [""])[0].startswith("pronghorn-actor-0"):
                    found.append(child.pid)
            except psutil.Error:
                continue
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_training_survives_sigkill_of_an_actor_and_counts_the_restart(tmp_path):
    logdir = tmp_path / "survivor"
    # A frame budget: survival is the point here, not how fast CartPole is solved.
    proc = start_training(logdir, "--total-frames", "150k", "--stop-at-return", "1e9")
    try:
        wait_for_file(logdir / "metrics.csv", proc)
        pids = _actor_pids(proc.pid)
        assert pids, "actor 0 not found by its process title"
        os.kill(pids[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "frame budget spent after 15" in out, err[-3000:]
    assert "actor 0 (CartPole-v1) died with exit code -9; reclaimed slots" in err
    assert int(read_csv(logdir / "metrics.csv")[-1]["actor_restarts"]) == 1
    assert_no_leaks(owners=(proc.pid,))


def test_a_crash_loop_stops_training_with_a_clear_error(tmp_path):
    proc, _, err = run_cli(
        [
            "train",
            "--env",
            "tests.flaky_env:SegfaultingCartPole-v0",
            "--logdir",
            str(tmp_path / "loop"),
            "--no-progress",
            "--num-actors",
            "1",
            "--max-actor-restarts",
            "2",
        ]
    )
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 1 and "died 3 times within 60 s (last exit code -9): a crash loop" in last, err[-3000:]
    assert_no_leaks(owners=(proc.pid,))
