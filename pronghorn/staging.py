"""Staging: a background thread assembles the next batch while the learner trains on the current one.

It takes `batch_slots` full slot indices, concatenates those slots along the environment dim into a
host buffer (pinned when the learner is on CUDA) -- the slots are time-major already, so the batch is
`[T+1, B, ...]` -- hands the slots back to the actors, and starts the copy to the device (non_blocking,
on its own CUDA stream). Two batch buffers alternate, so the learner trains on one while the other is
filled: at most one step of extra policy lag.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, NamedTuple, Optional

import torch

from pronghorn.records import Unroll


class StagedBatch(NamedTuple):
    data: Unroll  # [T+1, B, ...] on the learner's device
    wait_s: float  # time the learner waited for this batch
    stage_s: float  # time staging spent assembling it (queue waits excluded)


class _Stop(Exception):
    pass


class Staging:
    def __init__(
        self,
        slots: list[Unroll],
        full,
        free,
        batch_slots: int,
        device: torch.device,
        timeout: float,
        health_check: Callable[[], None],
        describe_producers: Callable[[], str],
        in_actor_order: int = 0,
    ):
        self._slots = slots
        self._full, self._free = full, free  # get(timeout) -> full slot index; put(index) frees one
        self._batch_slots = batch_slots
        self._device = device
        self._timeout = timeout
        self._health_check = health_check
        self._describe = describe_producers
        self._actors = in_actor_order  # lock-step: take slots round-robin by actor (full.get_from), not by arrival
        self._taken = 0
        cuda = device.type == "cuda"
        self._host = [self._allocate(pin=cuda) for _ in range(2)]
        self._on_device = [Unroll(*(torch.empty_like(t, device=device) for t in host)) for host in self._host] if cuda else self._host
        self._stream = torch.cuda.Stream(device) if cuda else None
        self._buffers_free: queue.Queue[int] = queue.Queue()
        for i in range(2):
            self._buffers_free.put(i)
        self._ready: queue.Queue = queue.Queue()
        self._in_use: Optional[int] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pronghorn-staging", daemon=True)
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
                    slot = self._full.get_from(self._taken % self._actors, timeout=0.5)
                    self._taken += 1
                    return slot
                return self._full.get(timeout=0.5)
            except queue.Empty:
                waited += 0.5
                self._health_check()
                if waited >= self._timeout:
                    raise TimeoutError(f"learner waited {waited:.0f} s for data: {self._describe()}")

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    buffer = self._buffers_free.get(timeout=0.5)
                except queue.Empty:
                    continue
                indices = [self._take_slot() for _ in range(self._batch_slots)]
                start = time.perf_counter()
                host = self._host[buffer]
                for field, out in zip(Unroll._fields, host):
                    torch.cat([getattr(self._slots[i], field) for i in indices], dim=1, out=out)
                # The data is copied out of the slots: only now may actors overwrite them.
                for i in indices:
                    self._free.put(i)
                event = None
                if self._stream is not None:
                    with torch.cuda.stream(self._stream):
                        for src, dst in zip(host, self._on_device[buffer]):
                            dst.copy_(src, non_blocking=True)
                        event = torch.cuda.Event()
                        event.record(self._stream)
                self._ready.put((buffer, event, time.perf_counter() - start))
        except _Stop:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the learner thread, which raises it
            self._ready.put(exc)

    def next(self) -> StagedBatch:
        """The next batch. The previous one is released: the learner must be done with it."""
        if self._in_use is not None:
            self._buffers_free.put(self._in_use)
            self._in_use = None
        start = time.perf_counter()
        while True:
            try:
                item = self._ready.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError("the staging thread stopped") from None
        if isinstance(item, BaseException):
            raise item
        buffer, event, stage_s = item
        if event is not None:
            torch.cuda.current_stream(self._device).wait_event(event)
        self._in_use = buffer
        return StagedBatch(self._on_device[buffer], time.perf_counter() - start, stage_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
