"""Single-machine runtime: actor processes, shared-memory slots, and slot indices over per-actor pipes.

Only indices travel (MonoBeast's design): an actor takes a free index, fills that slot in place and
sends the index back; staging copies a batch of full slots out and frees their indices. The slot count
bounds what can wait, so actors wait when the learner falls behind and memory never grows. The router
(runtime/router.py) knows which slots each actor holds, so an actor that dies is replaced and its slots
reclaimed; an actor that reports an error stops training.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import time
import traceback

import torch

from pronghorn.actor import actor_label, env_levels
from pronghorn.config import Config, resolved
from pronghorn.envs import EnvSpec
from pronghorn.records import Unroll, unroll_spec
from pronghorn.runtime.inference import InferenceServer, SharedMailbox
from pronghorn.runtime.router import PipeSink, PipeSource, SlotRouter
from pronghorn.runtime.shm import Counters, SlotArray, WeightStore, new_token, reap_orphaned_segments
from pronghorn.runtime.tuning import actor_core, limit_threads, lower_priority, pin_to_core

log = logging.getLogger("pronghorn.runtime")

_CRASH_WINDOW = 60.0  # seconds over which --max-actor-restarts counts restarts of one actor


class WorkerError(RuntimeError):
    """An actor process failed; the message names the actor and its last error."""


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a killed learner leaves no orphans."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: the stop flag and the learner's close() still end actors normally


def _actor_main(
    index: int, cfg: Config, spec: EnvSpec, slot_handles, weight_handle, counter_handle, free_conn, full_conn, stop, errors, parent: int, inference=None
) -> None:
    """Entry point of an actor process (spawned: imports start clean, no inherited threads)."""
    die_with_parent()
    if os.getppid() != parent:
        return  # the parent died before the death signal was armed
    lower_priority(resolved(cfg.actor_nice, "actor_nice"))  # first: the threads started below inherit it
    pin_to_core(actor_core(cfg, index, [cfg.level_names[lv] for lv in env_levels(cfg, index)]))  # inherited too, by the env's worker thread
    level = actor_label(cfg, index)
    try:
        import setproctitle

        setproctitle.setproctitle(f"pronghorn-actor-{index} {level}")
    except ImportError:
        pass
    import logging as _logging

    # Records name the actor (its process name), so "env 3 of level X raised ..." says which actor too.
    _logging.basicConfig(level=_logging.INFO, format="%(asctime)s %(processName)s %(name)s %(levelname)s %(message)s")
    # Ctrl-C goes to the whole process group; the learner decides how to stop, actors just follow.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_threads(1)  # processes x threads should stay near the core count
    try:
        import cv2

        cv2.setNumThreads(0)  # OpenCV otherwise starts threads in every worker
    except ImportError:
        pass
    from pronghorn.actor import run_actor

    slots = SlotArray.attach(slot_handles)
    weights = WeightStore.attach(weight_handle)
    counters = Counters(counter_handle, create=False)

    def stopping() -> bool:
        return bool(stop.value)

    policy, mailbox = None, None
    if inference is not None:  # --inference central: the server in the learner process answers each step
        from pronghorn.runtime.inference import InferenceClient, SharedMailbox

        mailbox_handles, inference_conn = inference
        mailbox = SharedMailbox.attach(mailbox_handles)
        policy = InferenceClient(index, mailbox, inference_conn, stopping, cfg.timeout)

    try:
        run_actor(
            index,
            cfg,
            spec,
            slots.slots,
            PipeSource(free_conn, stopping, cfg.timeout, f"actor {index}"),
            PipeSink(full_conn),
            weights,
            counters.row(index),
            stopping,
            policy,
        )
    except BaseException as exc:  # reported to the learner, which stops the run
        if not stopping():
            errors.send((index, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    finally:
        slots.release()
        weights.release()
        counters.release()
        if mailbox is not None:
            policy = None  # its views of the mailbox go first
            mailbox.release()


class LocalRuntime:
    """Owns the actor processes and every shared resource; `close()` leaves none behind."""

    def __init__(self, cfg: Config, spec: EnvSpec, num_params: int, core_size: int, device: torch.device | None = None):
        self.cfg = cfg
        reaped = reap_orphaned_segments()
        if reaped:
            log.warning("removed %d shared-memory segments left by processes that no longer exist (%s, ...)", len(reaped), reaped[0])
        self._ctx = mp.get_context("spawn")
        self._token = new_token()
        layout = unroll_spec(resolved(cfg.unroll_length, "unroll_length"), cfg.envs, spec.obs_shape, spec.obs_dtype, spec.num_actions, core_size)
        self.num_slots = cfg.buffer_slots
        self.slots = SlotArray.create(self._token, self.num_slots, layout)
        self._released = False
        self.weights = WeightStore.create(self._token, num_params)
        self.counters = Counters.create(self._token, cfg.num_actors)
        self.mailbox: SharedMailbox | None = None
        self.server: InferenceServer | None = None
        if cfg.inference == "central":
            self.mailbox = SharedMailbox.create(self._token, cfg, spec, core_size)
            self.server = InferenceServer(cfg, spec, self.weights, self.mailbox.box, device or torch.device("cpu"))
        # Two slots per actor (one filling, one queued) when there is room, so an actor never waits for the
        # learner's reply between unrolls; one otherwise.
        depth = 2 if self.num_slots - cfg.batch_slots >= 2 * cfg.num_actors else 1
        self.router = SlotRouter(self.num_slots, cfg.num_actors, depth)
        self.router.on_death = self._on_death
        # Actor i's error reports, one pipe each: a multiprocessing.Queue holds named semaphores, which a
        # SIGKILL of the whole process group (resource tracker included) leaves behind in /dev/shm.
        self._errors: dict[int, multiprocessing.connection.Connection] = {}
        # A lock-free shared byte, not multiprocessing.Event: Event.is_set() takes a shared lock, and an
        # actor killed while holding it would freeze every other actor and the learner.
        self._stop = self._ctx.RawValue("b", 0)
        self._spec = spec
        self.actors: list = [None] * cfg.num_actors
        self.restarts = 0
        self._restart_times: list[collections.deque[float]] = [collections.deque() for _ in range(cfg.num_actors)]

    def start(self) -> None:
        """Start the actors (and the inference server): they wait for the first weights to be published."""
        if self.server is not None:
            self.server.start()
        for i in range(self.cfg.num_actors):
            self._spawn(i)

    def _spawn(self, i: int) -> None:
        free_recv, free_send = self._ctx.Pipe(duplex=False)  # learner -> actor: free slots
        full_recv, full_send = self._ctx.Pipe(duplex=False)  # actor -> learner: full slots
        error_recv, error_send = self._ctx.Pipe(duplex=False)  # actor -> learner: the error that ended it, if one did
        inference, server_end, actor_end = None, None, None
        if self.mailbox is not None:
            server_end, actor_end = self._ctx.Pipe(duplex=True)  # one byte each way per step: "asked", "answered"
            inference = (self.mailbox.handles, actor_end)
        p = self._ctx.Process(
            target=_actor_main,
            name=f"pronghorn-actor-{i}",
            args=(
                i,
                self.cfg,
                self._spec,
                self.slots.handles,
                self.weights.handle,
                self.counters.handle,
                free_recv,
                full_send,
                self._stop,
                error_send,
                os.getpid(),
                inference,
            ),
            daemon=True,
        )
        p.start()
        free_recv.close()  # the child has its own copies; ours would hide the other side's end of file
        full_send.close()
        error_send.close()
        old = self._errors.pop(i, None)
        if old is not None:
            old.close()  # the dead predecessor's: read (or at end of file) before it was replaced
        self._errors[i] = error_recv
        if self.server is not None and server_end is not None and actor_end is not None:
            actor_end.close()
            self.server.connect(i, server_end)  # a replacement's new pipe: the server forgets the dead one
        self.actors[i] = p
        self.router.connect(i, free_send, full_recv, p.sentinel)

    def _reported_error(self, wait: float = 0.0) -> None:
        ready = multiprocessing.connection.wait(list(self._errors.values()), timeout=wait)
        for i, conn in list(self._errors.items()):
            if conn not in ready:
                continue
            try:
                index, summary, trace = conn.recv()
            except (EOFError, OSError):  # ended without a word (a signal, a kill): the router restarts it
                del self._errors[i]
                conn.close()
                continue
            log.error("actor %d failed:\n%s", index, trace)
            raise WorkerError(f"actor {index} ({actor_label(self.cfg, index)}) failed: {summary}")

    def _on_death(self, i: int) -> None:
        """Called by the router (staging thread) when actor i's process ends."""
        p = self.actors[i]
        p.join(1.0)
        if self._stop.value:
            self.router.reclaim(i)
            return
        self._reported_error(wait=0.5)  # an actor that raised says so before it exits: that is fatal
        level = actor_label(self.cfg, i)
        lost = self.router.reclaim(i)
        now = time.monotonic()
        times = self._restart_times[i]
        times.append(now)
        while times and now - times[0] > _CRASH_WINDOW:
            times.popleft()
        if len(times) > self.cfg.max_actor_restarts:
            raise WorkerError(
                f"actor {i} ({level}) died {len(times)} times within {_CRASH_WINDOW:.0f} s (last exit code {p.exitcode}): "
                f"a crash loop; see the log above, or raise --max-actor-restarts"
            )
        self.restarts += 1
        log.warning("actor %d (%s) died with exit code %s; reclaimed slots %s, dropped its partial unroll; restarting it", i, level, p.exitcode, lost)
        self._spawn(i)

    def alive(self) -> int:
        return sum(p is not None and p.is_alive() for p in self.actors)

    def metrics(self) -> dict[str, float]:
        """Runtime columns for metrics.csv (the Ray runtime adds its requests in flight; central inference its batching)."""
        row = {"actors_alive": float(self.alive())}
        if self.server is not None:
            row.update(self.server.metrics())
        return row

    def check_health(self) -> None:
        """Raise WorkerError if an actor reported an error (deaths are handled by the router: restarts)."""
        self._reported_error()
        if self.server is not None and self.server.error is not None:
            raise WorkerError(f"the inference server failed: {type(self.server.error).__name__}: {self.server.error}")

    def full_occupancy(self) -> float:
        """Fraction of slots full and waiting for the learner."""
        return self.router.ready / self.num_slots

    def close(self, timeout: float = 5.0) -> None:
        """Stop and reap every actor, then free every shared segment. Safe to call twice."""
        self._stop.value = 1
        actors = [p for p in self.actors if p is not None]
        if actors and not self._released and self.weights.version < 0:
            timeout = 0.0  # the start failed before the first weights: the actors have nothing to finish (and wait for those)
        deadline = time.monotonic() + timeout
        for p in actors:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in actors:
            if p.is_alive():
                p.terminate()
                p.join(1.0)
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
                p.join(1.0)
        self.actors = [None] * self.cfg.num_actors
        if self.server is not None:
            self.server.close()
        self.router.close()
        for conn in self._errors.values():
            conn.close()
        self._errors.clear()
        if not self._released:
            self.slots.release()
            self.weights.release()
            self.counters.release()
            if self.mailbox is not None:
                self.mailbox.release()
            self._released = True

    def env_failures(self) -> int:
        return self.counters.total("env_failures")

    def unroll_slots(self) -> list[Unroll]:
        return self.slots.slots
