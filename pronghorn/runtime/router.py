"""Slot ownership between the learner and its actors, over one pair of pipes per actor.

Why not two shared queues: a SIGKILLed actor can lose an index still sitting in `multiprocessing.Queue`'s
feeder buffer, or die holding a shared queue's lock and deadlock every other actor. Here each pipe has
a single writer and each message is 8 bytes (written atomically), so the learner always knows which
slots an actor holds: those sent to it and not yet returned. When an actor dies, whatever it finished
and sent is still read, and the slots it held go back to the free pool.

The router is used from one thread only (staging's): `get()` hands out full slots, `put()` takes
freed ones, and both keep the actors supplied.
"""

from __future__ import annotations

import collections
import math
import queue
import select
import struct
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

_FMT = struct.Struct("<q")


def _poll_for(*fds: int) -> select.poll:
    """A poll object watching `fds` for input (a closed writer's end or an exited process reads as ready too)."""
    poll = select.poll()
    for fd in fds:
        poll.register(fd, select.POLLIN)
    return poll


class PipeSource:
    """Actor end: free slot indices from the learner; None once training stops."""

    def __init__(self, conn: Connection, should_stop: Callable[[], bool], timeout: float, who: str):
        self._conn, self._should_stop, self._timeout, self._who = conn, should_stop, timeout, who
        # One poll object for the pipe's life: Connection.poll builds and tears down a selector on every call,
        # which cost the actor about as much as the rest of taking a slot.
        self._poll = _poll_for(conn.fileno())

    def get(self) -> int | None:
        waited = 0.0
        while not self._should_stop():
            if self._poll.poll(500):  # readable, or the learner's end closed (then recv_bytes raises EOFError)
                try:
                    return _FMT.unpack(self._conn.recv_bytes())[0]
                except EOFError:
                    return None  # the learner is gone
            waited += 0.5
            if waited >= self._timeout:
                raise TimeoutError(f"{self._who} waited {waited:.0f} s for a free slot: the learner is not consuming unrolls")
        return None


class PipeSink:
    """Actor end: full slot indices back to the learner."""

    def __init__(self, conn: Connection):
        self._conn = conn

    def put(self, index: int) -> None:
        self._conn.send_bytes(_FMT.pack(index))


class SlotRouter:
    """Learner end. Every slot is in exactly one place: free, held by actor i, ready (full), or at the learner."""

    def __init__(self, num_slots: int, num_actors: int, depth: int):
        self.num_slots = num_slots
        self.depth = depth  # slots an actor may hold at once: one it fills, the rest queued in its pipe
        self.free: collections.deque[int] = collections.deque(range(num_slots))
        self.ready_by: list[collections.deque[int]] = [collections.deque() for _ in range(num_actors)]  # full, per actor
        self._next_ready = 0  # round-robin over actors in get(), so no actor's unrolls wait behind another's
        self.held: list[set[int]] = [set() for _ in range(num_actors)]
        self.at_learner = 0
        self._to_actor: list[Connection | None] = [None] * num_actors
        self._from_actor: list[Connection | None] = [None] * num_actors
        self._sentinels: dict[int, int] = {}  # process sentinel -> actor index
        # Poll objects kept between calls (multiprocessing's wait() and Connection.poll() build a selector on every
        # call, a cost the learner pays per batch): every pipe and sentinel together, rebuilt when an actor
        # connects or is reclaimed, and each actor's pipe alone, for draining it.
        self._all: select.poll | None = None
        self._pipe: list[select.poll | None] = [None] * num_actors
        self.on_death: Callable[[int], None] = lambda index: None  # set by the runtime: decide, restart or raise

    def connect(self, index: int, to_actor: Connection, from_actor: Connection, sentinel: int) -> None:
        """Attach (or re-attach after a restart) actor `index`'s learner-side pipe ends and process sentinel."""
        self._to_actor[index], self._from_actor[index] = to_actor, from_actor
        self._sentinels = {s: i for s, i in self._sentinels.items() if i != index}
        self._sentinels[sentinel] = index
        self._pipe[index] = _poll_for(from_actor.fileno())
        self._all = None
        self._supply(index)

    def _supply(self, index: int) -> None:
        conn = self._to_actor[index]
        while conn is not None and self.free and len(self.held[index]) < self.depth:
            slot = self.free.popleft()
            try:
                conn.send_bytes(_FMT.pack(slot))
            except OSError:
                # BrokenPipeError: the actor is dead and its sentinel not yet handled. The slot never left
                # (an 8-byte write is all or nothing), so it stays free; the sentinel brings reclaim().
                self.free.appendleft(slot)
                return
            self.held[index].add(slot)

    def _receive(self, index: int) -> None:
        """Read every full slot actor `index` has sent (all complete messages, even after its death)."""
        conn, pipe = self._from_actor[index], self._pipe[index]
        try:
            while conn is not None and pipe is not None and pipe.poll(0):  # readable, or closed (recv then raises)
                slot = _FMT.unpack(conn.recv_bytes())[0]
                self.held[index].discard(slot)
                self.ready_by[index].append(slot)
        except (EOFError, OSError):
            pass  # the writer is gone; what it sent completely has been read
        self._supply(index)

    def reclaim(self, index: int) -> list[int]:
        """Actor `index` died: keep what it finished, free what it held (its partial unroll is dropped)."""
        to_actor, self._to_actor[index] = self._to_actor[index], None  # so _receive() supplies nothing to the dead
        self._receive(index)
        lost = sorted(self.held[index])
        self.free.extend(lost)
        self.held[index].clear()
        for conn in (to_actor, self._from_actor[index]):
            if conn is not None:
                conn.close()
        self._from_actor[index], self._pipe[index], self._all = None, None, None
        self._sentinels = {s: i for s, i in self._sentinels.items() if i != index}
        return lost

    @property
    def ready(self) -> int:
        """Full slots waiting for the learner."""
        return sum(len(q) for q in self.ready_by)

    def _wait(self, have, timeout: float) -> None:
        # First without waiting, even if a slot is ready: every unroll an actor has finished is taken in and
        # its slot replaced by a free one now. Taken in only once the learner ran out of ready slots, an actor
        # that had filled the slot queued in its pipe waited for that call with its core idle: CartPole's
        # defaults had the actors blocked 11-13 % of the time and 0.09-0.10 cores idle, 0.07-0.08 after,
        # at 1.01-1.06x the frames/s in four alternated pairs (docs/throughput_log.md).
        self._collect(0)
        deadline = time.monotonic() + timeout
        while not have():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise queue.Empty
            self._collect(math.ceil(remaining * 1000))

    def _collect(self, timeout_ms: int) -> None:
        """Wait up to timeout_ms for a pipe or a process sentinel, then take in what every actor has sent."""
        if self._all is None:
            self._all = _poll_for(*(c.fileno() for c in self._from_actor if c is not None), *self._sentinels)
        events = self._all.poll(timeout_ms)
        if not events:
            return
        for fd, _ in events:
            if fd in self._sentinels:
                self.on_death(self._sentinels[fd])  # reclaims, then restarts or raises
        for index in range(len(self._from_actor)):
            self._receive(index)

    def get(self, timeout: float) -> int:
        """A full slot index (now at the learner); raises queue.Empty after `timeout` seconds."""
        self._wait(lambda: self.ready > 0, timeout)
        n = len(self.ready_by)
        for k in range(n):
            index = (self._next_ready + k) % n
            if self.ready_by[index]:
                self._next_ready = index + 1
                self.at_learner += 1
                return self.ready_by[index].popleft()
        raise AssertionError("unreachable: a ready slot was counted")

    def get_from(self, index: int, timeout: float) -> int:
        """The next full slot of actor `index` in the order it sent them (lock-step mode)."""
        self._wait(lambda: bool(self.ready_by[index]), timeout)
        self.at_learner += 1
        return self.ready_by[index].popleft()

    def put(self, slot: int) -> None:
        """The learner has copied `slot` out: it is free again (and goes to an actor that has room)."""
        self.at_learner -= 1
        self.free.append(slot)
        for index in range(len(self.held)):
            self._supply(index)

    def accounted(self) -> int:
        """How many slots the router can place; equals num_slots unless one was lost (a bug)."""
        return len(self.free) + self.ready + sum(len(h) for h in self.held) + self.at_learner

    def close(self) -> None:
        for conn in self._to_actor + self._from_actor:
            if conn is not None:
                conn.close()
