"""Single-machine runtime: actor processes, shared-memory slots, and free/full queues of slot indices.

Only indices travel through the queues (MonoBeast's design): an actor takes a free index, fills that
slot in place, and puts the index on the full queue; staging copies a batch of full slots out and puts
their indices back on the free queue. The slot count bounds the full queue, so actors wait when the
learner falls behind and memory never grows.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from typing import Optional

from pronghorn.config import Config
from pronghorn.envs import EnvSpec
from pronghorn.records import Unroll, unroll_spec
from pronghorn.runtime.shm import Counters, SlotArray, WeightStore, new_token, reap_orphaned_segments

log = logging.getLogger("pronghorn.runtime")

_POLL = 0.5  # seconds between checks for a stop request while blocked on a queue


class WorkerError(RuntimeError):
    """An actor process failed; the message names the actor and its last error."""


class _QueueSource:
    """Free slot indices for an actor; None once training stops. Waits are bounded and named."""

    def __init__(self, q, stop, timeout: float, who: str):
        self._q, self._stop, self._timeout, self._who = q, stop, timeout, who

    def get(self) -> Optional[int]:
        waited = 0.0
        while not self._stop.is_set():
            try:
                return self._q.get(timeout=_POLL)
            except queue.Empty:
                waited += _POLL
                if waited >= self._timeout:
                    raise TimeoutError(f"{self._who} waited {waited:.0f} s for a free slot: the learner is not consuming unrolls")
        return None


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a killed learner leaves no orphans."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: the stop event and the learner's close() still end actors normally


def _actor_main(index: int, cfg: Config, spec: EnvSpec, slot_handles, weight_handle, counter_handle, free_q, full_q, stop, errors, parent: int) -> None:
    """Entry point of an actor process (spawned: imports start clean, no inherited threads)."""
    _die_with_parent()
    if os.getppid() != parent:
        return  # the parent died before the death signal was armed
    level = cfg.levels[index % len(cfg.levels)]
    try:
        import setproctitle

        setproctitle.setproctitle(f"pronghorn-actor-{index} {level}")
    except ImportError:
        pass
    # Ctrl-C goes to the whole process group; the learner decides how to stop, actors just follow.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    torch.set_num_threads(1)  # processes x threads should stay near the core count
    try:
        import cv2

        cv2.setNumThreads(0)  # OpenCV otherwise starts threads in every worker
    except ImportError:
        pass
    from pronghorn.actor import run_actor

    slots = SlotArray.attach(slot_handles)
    weights = WeightStore.attach(weight_handle)
    counters = Counters(counter_handle, create=False)
    try:
        run_actor(
            index, cfg, spec, slots.slots, _QueueSource(free_q, stop, cfg.timeout, f"actor {index}"), full_q, weights,
            counters.row(index), stop.is_set,
        )
    except BaseException as exc:  # noqa: BLE001 - reported to the learner, which stops the run
        if not stop.is_set():
            errors.put((index, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    finally:
        slots.release()
        weights.release()
        counters.release()


class LocalRuntime:
    """Owns the actor processes and every shared resource; `close()` leaves none behind."""

    def __init__(self, cfg: Config, spec: EnvSpec, num_params: int, core_size: int):
        self.cfg = cfg
        reaped = reap_orphaned_segments()
        if reaped:
            log.warning("removed %d shared-memory segments left by processes that no longer exist (%s, ...)", len(reaped), reaped[0])
        self._ctx = mp.get_context("spawn")
        self._token = new_token()
        layout = unroll_spec(cfg.unroll_length, cfg.envs_per_actor, spec.obs_shape, spec.obs_dtype, spec.num_actions, core_size)
        self.num_slots = cfg.buffer_slots
        self.slots = SlotArray.create(self._token, self.num_slots, layout)
        self.weights = WeightStore.create(self._token, num_params)
        self.counters = Counters.create(self._token, cfg.num_actors)
        self.free_queue = self._ctx.Queue()
        self.full_queue = self._ctx.Queue()
        self._errors = self._ctx.Queue()
        self._stop = self._ctx.Event()
        for i in range(self.num_slots):
            self.free_queue.put(i)
        self._spec = spec
        self.actors: list = []

    def start(self) -> None:
        """Start the actors; call after the first weights are published."""
        for i in range(self.cfg.num_actors):
            p = self._ctx.Process(
                target=_actor_main,
                name=f"pronghorn-actor-{i}",
                args=(i, self.cfg, self._spec, self.slots.handles, self.weights.handle, self.counters.handle,
                      self.free_queue, self.full_queue, self._stop, self._errors, os.getpid()),
                daemon=True,
            )
            p.start()
            self.actors.append(p)

    def alive(self) -> int:
        return sum(p.is_alive() for p in self.actors)

    def check_health(self) -> None:
        """Raise WorkerError if an actor reported an error or died."""
        try:
            index, summary, trace = self._errors.get_nowait()
        except queue.Empty:
            pass
        else:
            log.error("actor %d failed:\n%s", index, trace)
            raise WorkerError(f"actor {index} ({self.cfg.levels[index % len(self.cfg.levels)]}) failed: {summary}")
        for i, p in enumerate(self.actors):
            if not p.is_alive() and not self._stop.is_set():
                raise WorkerError(f"actor {i} died with exit code {p.exitcode}")

    def full_occupancy(self) -> float:
        """Fraction of slots waiting in the full queue."""
        try:
            return self.full_queue.qsize() / self.num_slots
        except NotImplementedError:  # macOS has no qsize
            return float("nan")

    def close(self, timeout: float = 5.0) -> None:
        """Stop and reap every actor, then free every shared segment. Safe to call twice."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for p in self.actors:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.actors:
            if p.is_alive():
                p.terminate()
                p.join(1.0)
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
                p.join(1.0)
        self.actors = []
        for q in (self.free_queue, self.full_queue, self._errors):
            q.close()
            q.cancel_join_thread()  # items left in a queue must not block our exit
        if self.slots is not None:
            self.slots.release()
            self.weights.release()
            self.counters.release()
            self.slots = None

    def env_failures(self) -> int:
        return self.counters.total("env_failures")

    def unroll_slots(self) -> list[Unroll]:
        return self.slots.slots
