"""The actor's side of the Ray runtime: one Ray actor per pronghorn actor, running `run_actor` over K local slots.

`ActorHost.unroll` hands the loop one slot to fill and returns its bytes; the weights come with each request.
The learner's side is `ray_runtime.py`.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any

import numpy as np
import torch

from pronghorn.config import Config, resolved
from pronghorn.envs import EnvSpec
from pronghorn.flat import load_flat
from pronghorn.records import packed_unroll, unroll_spec
from pronghorn.runtime.tuning import limit_threads

IN_FLIGHT = 2  # K: requests in flight per actor (one being filled, one queued behind it)


class _LocalWeights:
    """The WeightSource inside a Ray actor: the newest weights a request brought."""

    def __init__(self) -> None:
        self._newest: tuple[int, np.ndarray | None] = (-1, None)  # one attribute: a reader never pairs one version's number with another's values
        self._lock = threading.Lock()  # the K requests in flight arrive on Ray's threads, in any order
        self._ready = threading.Event()

    @property
    def version(self) -> int:
        return self._newest[0]

    def offer(self, flat: np.ndarray, version: int) -> None:
        with self._lock:
            if version > self._newest[0]:
                # A copy: Ray hands large arrays over as views of the object store, and a view kept here would
                # keep that version stored until the next one arrives.
                self._newest = (version, np.array(flat))
                self._ready.set()

    def load_into(self, model: torch.nn.Module, timeout: float) -> int:
        if not self._ready.wait(timeout):
            raise TimeoutError(f"waited {timeout:.0f} s for the learner's first weights")
        version, flat = self._newest
        assert flat is not None
        load_flat(list(model.parameters()), torch.from_numpy(flat))  # in place, as WeightSource promises
        return version

    def load_version(self, model: torch.nn.Module, version: int, timeout: float) -> int:
        raise RuntimeError("--deterministic is not supported with --runtime ray")


class ActorHost:
    """The body of one Ray actor: a `run_actor` thread over K local slots, fed by `unroll` calls."""

    def __init__(self, index: int, cfg: Config, spec: EnvSpec, core_size: int):
        limit_threads(1)
        self.index, self.cfg, self.spec = index, cfg, spec
        layout = unroll_spec(resolved(cfg.unroll_length, "unroll_length"), cfg.envs, spec.obs_shape, spec.obs_dtype, spec.num_actions, core_size)
        self._flat, self.slots = zip(*(packed_unroll(layout) for _ in range(IN_FLIGHT)))  # a slot is one block: one copy out
        self._idle: queue.Queue[int] = queue.Queue()
        for i in range(IN_FLIGHT):
            self._idle.put(i)
        self._free: queue.Queue[int] = queue.Queue()  # run_actor's slot source: the local slots requests hand in
        self._full: queue.Queue[int] = queue.Queue()
        self.weights = _LocalWeights()
        self.counters = np.zeros(3, np.int64)  # env_failures, unrolls, steps
        self._error: str | None = None
        self._thread: threading.Thread | None = None

    def where(self) -> dict[str, Any]:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def _loop(self) -> None:
        from pronghorn.actor import run_actor
        from pronghorn.runtime.tuning import lower_priority

        lower_priority(resolved(self.cfg.actor_nice, "actor_nice"))  # this thread only: Ray's own threads keep their priority
        try:
            # It runs until Ray ends the actor's process (ray.kill at close, or the actor's death).
            run_actor(self.index, self.cfg, self.spec, list(self.slots), self._free, self._full, self.weights, self.counters, lambda: False)
        except BaseException as exc:  # handed to the next request, which fails with it
            self._error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"

    def unroll(self, version: int, flat: np.ndarray) -> tuple[np.ndarray, int]:
        """One unroll made with weights no older than `version`; returns the slot's bytes and the env failures so far."""
        self.weights.offer(flat, version)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="pronghorn-actor-loop", daemon=True)
            self._thread.start()
        self._free.put(self._idle.get())
        deadline = time.monotonic() + self.cfg.timeout
        while True:
            if self._error is not None:
                raise RuntimeError(self._error)
            try:
                slot = self._full.get(timeout=0.5)
                break
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"actor {self.index} made no unroll in {self.cfg.timeout:.0f} s") from None
        data = self._flat[slot].numpy().copy()  # the slot is reused next
        self._idle.put(slot)
        return data, int(self.counters[0])
