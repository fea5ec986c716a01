"""Central batched inference (--inference central): actors step environments, one server acts for all.

Each actor has a mailbox in shared memory: a request (its E observations, and what the agent reads with
them) and a response (actions, logits, the core state before the step, truncation values, the weights'
version). Only one byte travels each way, over the actor's own pipe: "my request is written" and "your
answer is written". The server, a thread in the learner process, waits for the first request, then up to
--inference-max-wait-ms for the other live actors (or until --inference-max-batch environments), runs the
agent once on the learner's device for the whole batch, and answers. The LSTM state of every actor's
environments stays on the server; an episode start (terminated/truncated in the request) resets it.

Sampling draws each actor's uniforms from its own generator (seeded seed + actor index), so an actor's
actions do not depend on which other actors share its batch. An actor that dies closes its pipe: the
server stops waiting for it at once, and its replacement connects a new pipe (`connect`).
"""

from __future__ import annotations

import logging
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple

import numpy as np
import torch

from pronghorn.acting import Acting
from pronghorn.actor import WeightSource, env_levels
from pronghorn.config import Config
from pronghorn.envs import EnvSpec
from pronghorn.losses import clip_rewards
from pronghorn.models import build_agent
from pronghorn.records import PolicyAnswer
from pronghorn.runtime.shm import SegmentHandle, _Segment

log = logging.getLogger("pronghorn.runtime")

_READY = b"\x01"


class Mailbox(NamedTuple):
    """Every actor's request and response, one shared array per field with the actor index first."""

    obs: np.ndarray  # [N, E, *obs]      request: obs[t]
    final_obs: np.ndarray  # [N, E, *obs]  request: the ended episode's last obs where truncated
    last_action: np.ndarray  # [N, E] int64  request: the action that led to obs[t]
    reward: np.ndarray  # [N, E] float32     request: raw reward that came with obs[t]
    terminated: np.ndarray  # [N, E] bool
    truncated: np.ndarray  # [N, E] bool
    action: np.ndarray  # [N, E] int64       response
    policy_logits: np.ndarray  # [N, E, A] float32
    core_before: np.ndarray  # [N, 2, E, H] float32: the core state before obs[t]
    truncation_value: np.ndarray  # [N, E] float32
    version: np.ndarray  # [N, 1] int64 (a row stays a view of shared memory; a scalar would be a copy)


def mailbox_layout(cfg: Config, spec: EnvSpec, core_size: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    n, e = cfg.num_actors, cfg.envs
    obs = (n, e, *spec.obs_shape)
    return dict(
        obs=(obs, np.dtype(spec.obs_dtype)),
        final_obs=(obs, np.dtype(spec.obs_dtype)),
        last_action=((n, e), np.dtype(np.int64)),
        reward=((n, e), np.dtype(np.float32)),
        terminated=((n, e), np.dtype(np.bool_)),
        truncated=((n, e), np.dtype(np.bool_)),
        action=((n, e), np.dtype(np.int64)),
        policy_logits=((n, e, spec.num_actions), np.dtype(np.float32)),
        core_before=((n, 2, e, max(1, core_size)), np.dtype(np.float32)),
        truncation_value=((n, e), np.dtype(np.float32)),
        version=((n, 1), np.dtype(np.int64)),
    )


class SharedMailbox:
    """The mailbox in named shared memory; the learner creates it, actors attach with `handles`."""

    def __init__(self, handles: tuple[SegmentHandle, ...], create: bool):
        self.handles = handles
        self._segments = [_Segment(h.name, tuple(h.shape), np.dtype(h.dtype), create) for h in handles]
        self.box = Mailbox(*(s.array for s in self._segments))

    @classmethod
    def create(cls, token: str, cfg: Config, spec: EnvSpec, core_size: int) -> SharedMailbox:
        layout = mailbox_layout(cfg, spec, core_size)
        return cls(tuple(SegmentHandle(f"{token}-mail-{name}", shape, dtype.str) for name, (shape, dtype) in layout.items()), create=True)

    @classmethod
    def attach(cls, handles: tuple[SegmentHandle, ...]) -> SharedMailbox:
        return cls(handles, create=False)

    def release(self) -> None:
        self.box = Mailbox(*(np.empty(0) for _ in Mailbox._fields))
        for segment in self._segments:
            segment.release()


class InferenceClient:
    """The actor's side: a `Policy` (actor.py) that asks the server instead of running the agent."""

    def __init__(self, index: int, mailbox: SharedMailbox, conn: Connection, stopping: Any, timeout: float):
        self.index, self._conn, self._stopping, self._timeout = index, conn, stopping, timeout
        self._box = Mailbox(*(a[index] for a in mailbox.box))  # this actor's row of every field

    def answer(self, env_out, last_action: np.ndarray) -> PolicyAnswer:
        box = self._box
        box.obs[...] = env_out.obs
        box.last_action[...] = last_action
        box.reward[...] = env_out.reward
        box.terminated[...] = env_out.terminated
        box.truncated[...] = env_out.truncated
        if env_out.truncated.any():
            box.final_obs[env_out.truncated] = env_out.final_obs[env_out.truncated]
        self._conn.send_bytes(_READY)  # the request is complete: only now may the server read it
        deadline = time.monotonic() + self._timeout
        while not self._conn.poll(0.1):
            if self._stopping():
                raise InterruptedError("training is stopping")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the inference server did not answer actor {self.index} within {self._timeout:.0f} s")
        self._conn.recv_bytes()
        # Copies: the next request's answer overwrites the mailbox while this one is still being written out.
        return PolicyAnswer(box.action.copy(), box.policy_logits.copy(), box.core_before.copy(), box.truncation_value.copy(), int(box.version[0]))

    def refresh(self) -> None:
        """The server keeps its weights current; nothing to do between unrolls."""


class InferenceServer:
    """One agent on the learner's device answering every actor's steps in batches (a thread)."""

    def __init__(self, cfg: Config, spec: EnvSpec, weights: WeightSource, box: Mailbox, device: torch.device):
        self.cfg, self.box, self.device, self._weights = cfg, box, device, weights
        self.agent = build_agent(cfg, spec.obs_shape, spec.num_actions).to(device)
        self.agent.eval()
        self.version = -1
        n, e = cfg.num_actors, cfg.envs
        self.acting = Acting(self.agent, n * e)  # a batch holds at most every actor's environments
        self.core = self.agent.initial_state(n * e).view(2, n, e, -1).to(device)  # every env's state after its last answer
        self.levels = torch.tensor([env_levels(cfg, i) for i in range(n)], dtype=torch.int64)  # [N, E]
        self.generators = [np.random.default_rng(cfg.seed + i) for i in range(n)]  # as each actor's LocalPolicy draws
        self.max_envs = cfg.inference_max_batch or n * e
        self.max_wait = cfg.inference_max_wait_ms / 1000.0
        self._conns: list[Connection | None] = [None] * n
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        # statistics since the last metrics() call
        self._batches = self._envs = 0
        self._gather_max = self._compute_s = 0.0

    def connect(self, index: int, conn: Connection) -> None:
        """Actor `index` (new, or the replacement of a dead one) asks through `conn` from now on."""
        with self._lock:
            self._conns[index] = conn  # the dead actor's pipe ends in EOF; the server thread closes it (_drop)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pronghorn-inference", daemon=True)
        self._thread.start()

    def _live(self) -> dict[Connection, int]:
        with self._lock:
            return {c: i for i, c in enumerate(self._conns) if c is not None}

    def _drop(self, index: int, conn: Connection) -> None:
        """An actor's pipe ended (the actor died): stop waiting for it until its replacement connects."""
        with self._lock:
            if self._conns[index] is conn:
                self._conns[index] = None
        conn.close()

    @staticmethod
    def _wait(conns: list[Connection], timeout: float) -> list[Any]:
        try:
            return wait(conns, timeout=timeout)
        except (OSError, ValueError):  # a pipe closed under us (an actor replaced): the next pass rereads the live set
            return []

    def _take(self, conns: list[Any], live: dict[Connection, int], pending: list[int]) -> None:
        for conn in conns:
            index = live[conn]
            try:
                conn.recv_bytes()
                pending.append(index)
            except (EOFError, OSError):
                self._drop(index, conn)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                live = self._live()
                if not live:
                    time.sleep(0.01)
                    continue
                first = self._wait(list(live), 0.1)
                if not first:
                    continue
                start = time.monotonic()
                pending: list[int] = []
                self._take(first, live, pending)
                # Wait for the other live actors, at most max_wait after the first request came in.
                while pending and len(pending) * self.cfg.envs < self.max_envs:
                    rest = [c for c, i in live.items() if i not in pending and not c.closed]
                    remaining = start + self.max_wait - time.monotonic()
                    if not rest or remaining <= 0:
                        break
                    self._take(self._wait(rest, remaining), live, pending)
                if not pending:
                    continue
                self._gather_max = max(self._gather_max, time.monotonic() - start)
                for chunk in _chunks(sorted(pending), max(1, self.max_envs // self.cfg.envs)):
                    self._serve(chunk)
                    for index in chunk:
                        conn = self._conns[index]
                        try:
                            if conn is not None:
                                conn.send_bytes(_READY)
                        except (BrokenPipeError, OSError):
                            if conn is not None:
                                self._drop(index, conn)
        except BaseException as exc:  # handed to the learner through check_health
            self.error = exc
            log.exception("the inference server failed")

    @torch.inference_mode()
    def _serve(self, ids: list[int]) -> None:
        """Answer actors `ids` (their requests are complete) in one forward pass."""
        started = time.perf_counter()
        if self._weights.version != self.version:
            self.version = self._weights.load_into(self.agent, self.cfg.timeout)
        box, dev, e = self.box, self.device, self.cfg.envs
        sel = torch.tensor(ids)
        n = len(ids)
        b = n * e

        def rows(array: np.ndarray) -> torch.Tensor:  # [n, E, ...] of these actors -> [n*E, ...] on the device
            return torch.from_numpy(array[ids]).reshape(b, *array.shape[2:]).to(dev, non_blocking=True)

        obs, last_action = rows(box.obs), rows(box.last_action)
        terminated, truncated = rows(box.terminated), rows(box.truncated)
        reward = clip_rewards(rows(box.reward), self.cfg.reward_clipping)
        level = self.levels[sel].reshape(b).to(dev)
        core = self.core[:, sel].reshape(2, b, -1)
        uniform = torch.from_numpy(np.concatenate([self.generators[i].random((e, 1), dtype=np.float32) for i in ids])).to(dev)
        done = terminated | truncated
        cut = final_obs = None
        if box.truncated[ids].any():
            # V(final_obs) in the same pass, with the core state from before the reset, as the actor's own agent does.
            cut = torch.nonzero(truncated).squeeze(1)
            final_obs = rows(box.final_obs)[cut]
        out, new_core, cut_values = self.acting(obs, last_action, reward, done, core, level, uniform, cut, final_obs)
        values = torch.zeros(b)
        if cut is not None and cut_values is not None:
            values[cut.cpu()] = cut_values.float().cpu()
        self.core[:, sel] = new_core.view(2, n, e, -1)
        # The answers go back through shared memory: one copy to the host for the whole batch.
        box.action[ids] = out.action.cpu().view(n, e).numpy()
        box.policy_logits[ids] = out.policy_logits.float().cpu().view(n, e, -1).numpy()
        box.core_before[ids] = core.cpu().view(2, n, e, -1).permute(1, 0, 2, 3).numpy()
        box.truncation_value[ids] = values.view(n, e).numpy()
        box.version[ids] = self.version
        self._batches += 1
        self._envs += b
        self._compute_s += time.perf_counter() - started

    def metrics(self) -> dict[str, float]:
        """Batching since the last call: mean envs per batch, longest wait for a batch to fill, compute time."""
        batches = max(1, self._batches)
        row = {
            "inference_batch_envs": self._envs / batches,
            "inference_gather_ms_max": 1000 * self._gather_max,
            "inference_compute_ms": 1000 * self._compute_s / batches,
        }
        self._batches = self._envs = 0
        self._gather_max = self._compute_s = 0.0
        return row

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for i, conn in enumerate(self._conns):
            if conn is not None:
                conn.close()
                self._conns[i] = None


def _chunks(ids: list[int], size: int) -> list[list[int]]:
    return [ids[k : k + size] for k in range(0, len(ids), size)]
