"""Staging: a background thread assembles the next batch while the learner trains on the current one
(on an accelerator, or with replay; on CPU without replay the learner assembles it when it asks).

It takes `batch_slots` full slot indices, concatenates those slots along the environment dim into a
host buffer (pinned when the learner is on CUDA) -- the slots are time-major already, so the batch is
`[T+1, B, ...]` -- hands the slots back to the actors, and starts the copy to the device (non_blocking,
on its own CUDA stream). Two batch buffers alternate, so the learner trains on one while the other is
filled: at most one step of extra policy lag. On CPU without replay, a batch of one slot (every default
batch) is not copied at all: the learner trains on the slot itself and hands it back when it asks for the
next batch.

With replay, this thread is the replay ring's only owner: after the fresh slots are copied in and handed
back, it draws the replayed columns into the rest of the batch, then stores the fresh columns in the ring
(after the draw, so a batch never replays itself), then starts the device copy. The learner never waits
for sampling, and nothing else touches the ring except a checkpoint, under `replay_lock`.
Layout of a batch: columns [0, fresh) are fresh, [fresh, B) replayed.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch

from pronghorn.records import Unroll
from pronghorn.replay import ReplayRing, ReplaySample


class StagedBatch(NamedTuple):
    data: Unroll  # [T+1, B, ...] on the learner's device; valid until the next call to Staging.next()
    wait_s: float  # time the learner waited for this batch
    stage_s: float  # time staging spent assembling it (queue waits excluded)
    fresh: int = -1  # columns [0, fresh) came from the actors, the rest from replay; -1: all fresh (no replay)
    number: int = 0  # batches staged before this one
    replay: ReplaySample | None = None  # where its columns live in the ring (with replay on)


class _Stop(Exception):
    pass


class SlotSource(Protocol):
    """Where full slots come from (the runtime's router; a queue in tests)."""

    def get(self, timeout: float) -> int: ...


@runtime_checkable
class OrderedSlotSource(SlotSource, Protocol):
    """A source that can serve one actor's slots (--deterministic's lock-step)."""

    def get_from(self, actor: int, timeout: float) -> int: ...


class SlotSink(Protocol):
    """Where copied-out slots go back to (the actors)."""

    def put(self, index: int) -> None: ...


class Staging:
    def __init__(
        self,
        slots: list[Unroll],
        full: SlotSource,
        free: SlotSink,
        batch_slots: int,
        device: torch.device,
        timeout: float,
        health_check: Callable[[], None],
        describe_producers: Callable[[], str],
        in_actor_order: int = 0,
        replay: ReplayRing | None = None,
        replay_columns: int = 0,
        threaded: bool | None = None,
    ):
        """threaded: assemble batches in a background thread; None decides: on an accelerator or with replay."""
        self._slots = slots
        self._full, self._free = full, free  # get(timeout) -> full slot index; put(index) frees one
        self._batch_slots = batch_slots
        self._device = device
        self._timeout = timeout
        self._health_check = health_check
        self._describe = describe_producers
        self._actors = in_actor_order  # lock-step: take slots round-robin by actor (full.get_from), not by arrival
        self._taken = 0
        self._replay = replay
        self._replay_columns = replay_columns if replay is not None else 0
        self.replay_lock = threading.Lock()
        self._priorities: queue.Queue[tuple[int, torch.Tensor]] = queue.Queue()  # (batch number, [B] priorities) from the learner
        self._pending: dict[int, torch.Tensor] = {}
        self._placed: dict[int, ReplaySample] = {}  # batch number -> where its columns live, until its priorities come
        self._staged = 0
        cuda = device.type == "cuda"
        # A thread earns its keep where there is work to overlap with an update: the copy to an accelerator,
        # or replay's sampling. On CPU without replay a batch is only copied out of the slots, which the
        # learner does itself when it asks, in one buffer: a hand-off to a thread costs two wake-ups per batch.
        self.threaded = (cuda or replay is not None) if threaded is None else threaded
        # A batch of one slot is that slot itself (below, next()): no copy and no batch buffer, and the slot stays
        # the learner's until it asks for the next batch. Not with a device copy to make, nor with replay (threaded).
        self._zero_copy = not self.threaded and batch_slots == 1 and not cuda
        self._held: int | None = None  # the slot the learner is training on (zero copy)
        self._host = [] if self._zero_copy else [self._allocate(pin=cuda) for _ in range(2 if self.threaded else 1)]
        self._on_device = [Unroll(*(torch.empty_like(t, device=device) for t in host)) for host in self._host] if cuda else self._host
        self._stream = torch.cuda.Stream(device) if cuda else None  # type: ignore[no-untyped-call]  # torch.cuda.Stream.__new__ is unannotated
        self._buffers_free: queue.Queue[int] = queue.Queue()
        for i in range(len(self._host)):
            self._buffers_free.put(i)
        self._ready: queue.Queue[Any] = queue.Queue()  # a staged batch's parts, or the exception that stopped staging
        self._in_use: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pronghorn-staging", daemon=True)
        if self.threaded:
            self._thread.start()

    def _allocate(self, pin: bool) -> Unroll:
        def batch_of(t: torch.Tensor) -> torch.Tensor:
            shape = list(t.shape)
            shape[1] *= self._batch_slots  # environment dim
            return torch.empty(shape, dtype=t.dtype, pin_memory=pin)

        return Unroll(*(batch_of(t) for t in self._slots[0]))

    def _take_slot(self) -> int:
        waited = 0.0
        while True:
            if self._stop.is_set():
                raise _Stop
            try:
                if self._actors:
                    assert isinstance(self._full, OrderedSlotSource), "lock-step needs a source that serves each actor in turn"
                    slot = self._full.get_from(self._taken % self._actors, timeout=0.5)
                    self._taken += 1
                    return slot
                return self._full.get(timeout=0.5)
            except queue.Empty:
                waited += 0.5
                self._health_check()
                if waited >= self._timeout:
                    raise TimeoutError(f"learner waited {waited:.0f} s for data: {self._describe()}") from None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    buffer = self._buffers_free.get(timeout=0.5)
                except queue.Empty:
                    continue
                ring = self._replay
                # Until the ring holds as many columns as a batch replays, batches are all fresh.
                replayed = self._replay_columns if ring is not None and ring.size >= self._replay_columns else 0
                width = self._slots[0].obs.shape[1]
                host = self._host[buffer]
                fresh, start = self._gather(host, self._batch_slots - replayed // width)  # stage_s counts from the copy, not the wait for slots
                sample = self._replay_step(host, fresh, replayed) if ring is not None else None
                event = None
                if self._stream is not None:
                    with torch.cuda.stream(self._stream):
                        for src, dst in zip(host, self._on_device[buffer]):
                            dst.copy_(src, non_blocking=True)
                        event = torch.cuda.Event()  # type: ignore[no-untyped-call]  # unannotated in torch
                        event.record(self._stream)
                self._ready.put((buffer, event, time.perf_counter() - start, fresh if ring is not None else -1, self._staged, sample))
                self._staged += 1
        except _Stop:
            pass
        except BaseException as exc:  # handed to the learner thread, which raises it
            self._ready.put(exc)

    def _gather(self, host: Unroll, count: int) -> tuple[int, float]:
        """Take `count` full slots, copy them side by side into host's first columns, hand them back.
        Returns the columns filled and when the last slot came (perf_counter): the copying starts there."""
        indices = [self._take_slot() for _ in range(count)]
        arrived = time.perf_counter()
        width = self._slots[0].obs.shape[1]
        for j, i in enumerate(indices):
            for src, out in zip(self._slots[i], host):
                out[:, j * width : (j + 1) * width] = src
        # The data is copied out of the slots: only now may actors overwrite them.
        for i in indices:
            self._free.put(i)
        return len(indices) * width, arrived

    def _replay_step(self, host: Unroll, fresh: int, replayed: int) -> ReplaySample:
        """Draw the replayed columns into host[:, fresh:], then store the fresh ones in the ring."""
        ring = self._replay
        assert ring is not None
        with self.replay_lock:
            self._apply_priorities(ring)
            if replayed:
                positions, stamps, weights = ring.sample(replayed)
                ring.gather(positions, host, fresh)
            else:
                positions, stamps, weights = (torch.zeros(0, dtype=torch.int64),) * 2 + (torch.ones(0),)
            new_positions, new_stamps = ring.add(host, 0, fresh)
        sample = ReplaySample(torch.cat([new_positions, positions]), torch.cat([new_stamps, stamps]), torch.cat([torch.ones(fresh), weights]))
        if ring.prioritized:
            self._placed[self._staged] = sample
        return sample

    def _apply_priorities(self, ring: ReplayRing) -> None:
        """Apply the learner's priorities for batches up to two before this one, and no later ones.

        Batch n is staged once the learner has asked for batch n-1, which it does only after it reported
        batch n-2; batch n-1's report may or may not have come. Taking exactly those up to n-2 keeps the
        draws independent of thread timing (what --deterministic needs)."""
        while True:
            try:
                number, priorities = self._priorities.get_nowait()
            except queue.Empty:
                break
            self._pending[number] = priorities
        for number in sorted(k for k in self._pending if k <= self._staged - 2):
            placed = self._placed.pop(number)
            ring.update_priorities(placed.positions, placed.stamps, self._pending.pop(number))

    def report_priorities(self, number: int, priorities: torch.Tensor) -> None:
        """The learner's per-column priorities [B] for batch `number` (prioritized replay only)."""
        if self._replay is not None and self._replay.prioritized:
            self._priorities.put((number, priorities.detach().to("cpu", torch.float64)))

    def replay_state(self) -> dict[str, Any] | None:
        """A copy of the ring for a checkpoint, taken between two batches."""
        if self._replay is None:
            return None
        with self.replay_lock:
            return self._replay.state_dict()

    def next(self) -> StagedBatch:
        """The next batch. The previous one is released: the learner must be done with it."""
        if self._in_use is not None:
            self._buffers_free.put(self._in_use)
            self._in_use = None
        if self._held is not None:
            # The learner is done with the slot it trained on (it asked for the next batch): the actors may refill it.
            self._free.put(self._held)
            self._held = None
        start = time.perf_counter()
        if not self.threaded:
            try:
                if self._zero_copy:
                    self._held = self._take_slot()
                    batch, arrived, stage_s = self._slots[self._held], time.perf_counter(), 0.0  # no copy made, nothing to time
                else:
                    batch = self._host[0]
                    _, arrived = self._gather(batch, self._batch_slots)
                    stage_s = time.perf_counter() - arrived
            except _Stop:
                raise RuntimeError("staging was closed") from None
            self._staged += 1
            return StagedBatch(batch, arrived - start, stage_s, -1, self._staged - 1, None)
        while True:
            try:
                item = self._ready.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError("the staging thread stopped") from None
        if isinstance(item, BaseException):
            raise item
        buffer, event, stage_s, fresh, number, sample = item
        if event is not None:
            torch.cuda.current_stream(self._device).wait_event(event)
        self._in_use = buffer
        return StagedBatch(self._on_device[buffer], time.perf_counter() - start, stage_s, fresh, number, sample)

    def close(self) -> None:
        self._stop.set()
        if self.threaded:
            self._thread.join(timeout=5.0)
