"""Named POSIX shared memory: unroll slots, the published weights and per-actor counters.

Every segment is named `pronghorn-<pid>-<token>-<what>` so a leak is easy to spot in /dev/shm. The
creating process owns and unlinks them; other processes attach through a picklable handle.
"""

from __future__ import annotations

import os
import secrets
import time
from multiprocessing import resource_tracker, shared_memory
from typing import NamedTuple

import numpy as np
import torch

from pronghorn.flat import flat_view, load_flat
from pronghorn.records import FieldLayout, Unroll

SHM_PREFIX = "pronghorn-"


def _attach(name: str) -> shared_memory.SharedMemory:
    """Attach without registering with the resource tracker: the creator owns the segment.

    (Python < 3.13 registers on attach too, and would then unlink or warn when the *attaching*
    process exits; 3.13 has `track=False` for this.)
    """
    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name, create=False)
    finally:
        resource_tracker.register = register


_RELEASED: np.ndarray = np.empty(0)  # what a released view is replaced with


class _Segment:
    """One shared block seen as a numpy array."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype, create: bool):
        nbytes = max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        self.shm = shared_memory.SharedMemory(name=name, create=True, size=nbytes) if create else _attach(name)
        self.array = np.ndarray(shape, dtype=dtype, buffer=self.shm.buf)
        self.owner = create

    def release(self) -> None:
        self.array = _RELEASED  # drop the view first, or close() refuses (exported buffer)
        try:
            self.shm.close()
        except BufferError:
            pass  # a torch view is still alive somewhere; the mapping goes with the process
        if self.owner:
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass


class SegmentHandle(NamedTuple):
    name: str
    shape: tuple[int, ...]
    dtype: str


def reap_orphaned_segments() -> list[str]:
    """Unlink segments whose creating process is gone (a learner killed with SIGKILL cannot clean up)."""
    reaped: list[str] = []
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return reaped
    for name in names:
        if not name.startswith(SHM_PREFIX):
            continue
        try:
            pid = int(name[len(SHM_PREFIX) :].split("-", 1)[0])
            os.kill(pid, 0)
        except ValueError:
            continue  # not one of ours after all
        except ProcessLookupError:
            try:
                os.unlink(os.path.join("/dev/shm", name))
                reaped.append(name)
            except FileNotFoundError:
                pass
        except PermissionError:
            pass  # another user's live process
    return reaped


def new_token() -> str:
    return f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"


class SlotArray:
    """`num_slots` preallocated unroll slots: one shared block per Unroll field, [num_slots, *field_shape].

    `slots[i]` is an Unroll of torch tensors viewing slot i (no copy). `handles` (one per field, in
    Unroll._fields order) is what a child process needs to attach.
    """

    def __init__(self, handles: tuple[SegmentHandle, ...], create: bool):
        self.handles = handles
        self._segments = [_Segment(h.name, tuple(h.shape), np.dtype(h.dtype), create) for h in handles]
        tensors = Unroll(*(torch.from_numpy(s.array) for s in self._segments))
        num_slots = tensors.obs.shape[0]
        self.slots = [Unroll(*(t[i] for t in tensors)) for i in range(num_slots)]

    @classmethod
    def create(cls, token: str, num_slots: int, layout: tuple[FieldLayout, ...]) -> SlotArray:
        handles = tuple(SegmentHandle(f"{token}-{field}", (num_slots, *shape), dtype.str) for field, (shape, dtype) in zip(Unroll._fields, layout))
        return cls(handles, create=True)

    @classmethod
    def attach(cls, handles: tuple[SegmentHandle, ...]) -> SlotArray:
        return cls(handles, create=False)

    def release(self) -> None:
        self.slots = []
        for segment in self._segments:
            segment.release()


_SPIN_SECONDS = 100e-6  # how long a weights reader retries at once before it sleeps between tries


class WeightStore:
    """The learner's weights, flat float32 in shared memory, with a version number.

    Two buffers alternate by version parity: version v lives in buffer v % 2, so version v-1 can still
    be read while v+1 is written (what --deterministic's lock-step needs). A seqlock keeps readers of
    the latest version from taking a half-written copy without ever blocking the learner: the writer
    makes `seq` odd while it writes and even when done; a reader retries if `seq` was odd or changed.
    """

    def __init__(self, handle: SegmentHandle, create: bool):
        self.handle = handle
        self._segment = _Segment(handle.name, handle.shape, np.dtype(handle.dtype), create)
        header = self._segment.array[:4].view(np.int64)  # two int64: seq, version
        self._seq, self._version = header[0:1], header[1:2]
        flat = torch.from_numpy(self._segment.array[4:])
        half = flat.numel() // 2
        self._buffers = (flat[:half], flat[half:])
        if create:
            self._seq[0] = 0
            self._version[0] = -1  # nothing published yet

    @classmethod
    def create(cls, token: str, num_params: int) -> WeightStore:
        return cls(SegmentHandle(f"{token}-weights", (4 + 2 * num_params,), np.dtype(np.float32).str), create=True)

    @classmethod
    def attach(cls, handle: SegmentHandle) -> WeightStore:
        return cls(handle, create=False)

    @property
    def version(self) -> int:
        return int(self._version[0])

    def publish(self, model: torch.nn.Module, version: int, flat: torch.Tensor | None = None) -> None:
        """flat: `model`'s parameters as the one tensor they are views of (flat.py), where the caller holds it,
        as the learner does. Finding it from the model walks every module each update: on CartPole's MLP
        that took ten times the copy itself."""
        self._seq[0] += 1  # odd: write in progress
        buffer = self._buffers[version % 2]
        params = [] if flat is not None else [p.detach() for p in model.parameters()]
        flat = flat.detach() if flat is not None else flat_view(params)
        if flat is not None:  # the learner's parameters are views of one tensor (flat.py): one copy
            buffer.copy_(flat)
        elif params and params[0].device.type != "cpu":
            # One kernel and one device-to-host copy (it waits for this stream's work, not the whole device),
            # rather than a copy, and a wait, per tensor.
            buffer.copy_(torch.cat([p.reshape(-1) for p in params]))
        else:
            offset = 0
            for p in params:
                n = p.numel()
                buffer[offset : offset + n].copy_(p.reshape(-1))
                offset += n
        self._version[0] = version
        self._seq[0] += 1  # even: consistent again

    def load_into(self, model: torch.nn.Module, timeout: float) -> int:
        """Copy the latest consistent weights into `model`; returns their version."""
        deadline = time.monotonic() + timeout
        spin_until = 0.0
        while True:
            seq = int(self._seq[0])
            if seq % 2 == 0 and self.version >= 0:
                version = self.version
                self._copy_out(version, model)
                if int(self._seq[0]) == seq:
                    return version
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for the learner to publish consistent weights")
            # The learner was writing. A small model's copy takes it microseconds: retry at once for a while
            # before sleeping between tries. At CartPole's defaults each actor met a write about ten times a
            # second and slept 0.5 ms each time; with this spin `strace -c` counted none of those sleeps.
            spin_until = spin_until or now + _SPIN_SECONDS
            if now > spin_until:
                time.sleep(0.0005)

    def _copy_out(self, version: int, model: torch.nn.Module) -> None:
        buffer = self._buffers[version % 2]
        params = list(model.parameters())
        if params and params[0].device.type != "cpu" and flat_view(params) is None:
            buffer = buffer.to(params[0].device)  # the inference server on an accelerator: one host-to-device copy
        load_flat(params, buffer)

    def load_version(self, model: torch.nn.Module, version: int, timeout: float) -> int:
        """Wait until `version` is published, then load exactly that version (lock-step mode).

        Safe without the seqlock: the learner writes version+1 into the other buffer, and cannot write
        version+2 (into ours) before this actor's next unroll, which needs these weights, has arrived.
        """
        deadline = time.monotonic() + timeout
        while self.version < version:
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for the learner to publish weights version {version}")
            time.sleep(0.0002)
        self._copy_out(version, model)
        if self.version > version + 1:
            raise RuntimeError(f"lock-step broken: weights version {self.version} was published while version {version} was read")
        return version

    def release(self) -> None:
        self._buffers = (torch.empty(0), torch.empty(0))  # drop the views before the segment closes
        self._seq = self._version = _RELEASED
        self._segment.release()


class Counters:
    """Per-actor int64 counters in shared memory: [num_actors, len(FIELDS)]."""

    FIELDS = ("env_failures", "unrolls", "steps")

    def __init__(self, handle: SegmentHandle, create: bool):
        self.handle = handle
        self._segment = _Segment(handle.name, handle.shape, np.dtype(handle.dtype), create)
        self.array = self._segment.array
        if create:
            self.array[:] = 0

    @classmethod
    def create(cls, token: str, num_actors: int) -> Counters:
        return cls(SegmentHandle(f"{token}-counters", (num_actors, len(cls.FIELDS)), np.dtype(np.int64).str), create=True)

    def total(self, field: str) -> int:
        return int(self.array[:, self.FIELDS.index(field)].sum())

    def row(self, actor: int) -> np.ndarray:
        return self.array[actor]

    def release(self) -> None:
        self.array = _RELEASED
        self._segment.release()
