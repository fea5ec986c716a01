"""Actors on Ray (`--runtime ray`): the same `run_actor` loop and the same learner, actors on any node.

Pull, not push. Each pronghorn actor is one Ray actor (1 CPU, spread over the nodes) running the unchanged
`run_actor` in a thread over K local slots (`ray_actor.ActorHost`). The learner's pump thread keeps at most
K requests in flight per actor and makes one only when a learner-side slot is free to receive its unroll:
that is the backpressure, and it bounds what waits in Ray's object store to about N*K unrolls. Each request
carries the newest weights (by value when small, else a reference put once per version and shared); where
unrolls are long an actor's second request goes out a quarter of an unroll before the actor needs it
(`second_request_due`), so that the weights it brings are about as new as a local actor's. Policy lag is
measured as in the local runtime. A result is copied into the learner-side slot reserved for it and its
reference dropped at once; staging reads those slots exactly as it reads shared memory locally.

Faults: a request whose actor died (killed, node lost) raises a Ray actor error; its slot is freed, the
death is counted once (`actor_restarts`), and Ray restarts the actor (max_restarts=-1), elsewhere if
its node is gone. pronghorn's crash-loop rule (--max-actor-restarts within 60 s) applies on top. An
actor whose env loop raised (e.g. --max-env-failures exceeded) fails its request with the error,
which stops training with that message, as locally.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import re
import signal
import threading
import time
from typing import Any

import numpy as np
import torch

from pronghorn.actor import actor_label
from pronghorn.config import Config, ConfigError, resolved
from pronghorn.envs import EnvSpec
from pronghorn.records import Unroll, packed_unroll, unroll_spec
from pronghorn.runtime.local import _CRASH_WINDOW, WorkerError
from pronghorn.runtime.ray_actor import IN_FLIGHT, ActorHost

# Ray otherwise rewrites 127.0.0.1 to the machine's interface address (see MACHINE-FACTS); set before ray is imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

log = logging.getLogger("pronghorn")

# Actors whose unrolls take at least this long get their second request late (second_request_due), this long or a
# quarter of an unroll (whichever is longer) before they will need it: time enough for it and its weights to arrive.
LATE_REQUEST_MIN_PERIOD = 0.02
LATE_REQUEST_SLACK = 0.01


def second_request_due(now: float, period: float, arrived: float) -> bool:
    """Whether to send an actor its second request in flight, the one queued behind the unroll it is making, now.

    A request carries the weights of when it is sent, and the actor makes its unroll with them (it takes the
    newest weights after the slot arrives). Sent as the actor starts an unroll (when its last one `arrived`),
    it would have the next unroll made with weights a whole unroll old, where a local actor loads the newest
    as it starts each unroll: Pong's defaults read a policy lag 1.76 above the local runtime's so, and 0.11-0.18
    above it sent late (benchmarks/throughput.py --runtime ray, 2026-12-08). For unrolls of
    LATE_REQUEST_MIN_PERIOD or longer (`period`, the mean) it is sent a quarter of an unroll, or
    LATE_REQUEST_SLACK, before the actor will need it.
    """
    return period < LATE_REQUEST_MIN_PERIOD or now - arrived >= period - max(period / 4, LATE_REQUEST_SLACK)


# Weights up to this size travel inside each request (Ray inlines task arguments under 100 KiB): nothing in
# the object store at all. Larger ones are put there once per version and shared by every request.
INLINE_WEIGHT_BYTES = 64 * 1024


class _Weights:
    """The newest weights: copied on publish (every update), put in the object store only when a request
    needs them (once per version, shared by every request that carries it). Putting on every update would
    leave a trail of superseded copies that Ray frees lazily (seen: 2-3 MiB of CartPole weights)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flat: np.ndarray | None = None
        self._ref: Any = None
        self.version = -1

    def publish(self, model: torch.nn.Module, version: int, flat: torch.Tensor | None = None) -> None:
        """flat: the model's parameters as one tensor (the learner's, flat.py), if the caller holds it."""
        if flat is not None:
            values = flat.detach().cpu().numpy().copy()  # a copy: the learner's next step writes into its own
        else:
            values = torch.nn.utils.parameters_to_vector([p.detach().cpu() for p in model.parameters()]).numpy()
        with self._lock:
            self._flat, self._ref, self.version = values, None, version

    def current(self) -> tuple[int, Any]:
        """(version, object ref) of the newest weights, put now if this version has not been yet."""
        import ray

        with self._lock:
            if self._flat is not None and self._flat.nbytes <= INLINE_WEIGHT_BYTES:
                return self.version, self._flat  # by value, inside the request
            if self._ref is None and self._flat is not None:
                self._ref = ray.put(self._flat)
            return self.version, self._ref


class _Router:
    """Learner-side slots: staging gets full ones, puts copied-out ones back for the pump to reserve."""

    def __init__(self, num_slots: int) -> None:
        self.full: queue.Queue[int] = queue.Queue()
        self.free: queue.Queue[int] = queue.Queue()
        for i in range(num_slots):
            self.free.put(i)

    def get(self, timeout: float) -> int:
        return self.full.get(timeout=timeout)

    def put(self, index: int) -> None:
        self.free.put(index)


class RayRuntime:
    """The local runtime's interface (weights, router, slots, health, restarts, close) over Ray actors."""

    def __init__(self, cfg: Config, spec: EnvSpec, num_params: int, core_size: int):
        import ray

        self.cfg, self._spec, self._core_size = cfg, spec, core_size
        self._own_ray = not ray.is_initialized()
        if self._own_ray:
            # ray.init replaces the process's SIGTERM handler with sys.exit(15): the CLI's (stop as on Ctrl-C:
            # checkpoint, stop the actors, exit 130) is put back, or a SIGTERM'd run would end without its summary.
            on_sigterm = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
            if cfg.ray_address:
                ray.init(address=cfg.ray_address, include_dashboard=False, log_to_driver=False)
            else:  # a private instance on loopback, no dashboard, gone when training ends
                ray.init(num_cpus=cfg.num_actors, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
            if on_sigterm is not None:
                signal.signal(signal.SIGTERM, on_sigterm)
        layout = unroll_spec(resolved(cfg.unroll_length, "unroll_length"), cfg.envs, spec.obs_shape, spec.obs_dtype, spec.num_actions, core_size)
        self.unroll_bytes = sum(int(np.prod(shape)) * dtype.itemsize for shape, dtype in layout)
        self.weight_bytes = 4 * num_params
        # What can wait in the object store at once: N*K unrolls and two weight copies (the newest and the
        # one requests still in flight refer to). Refuse a cluster whose store cannot hold that.
        need = cfg.num_actors * IN_FLIGHT * self.unroll_bytes + 2 * self.weight_bytes
        store = ray.cluster_resources().get("object_store_memory", float("inf"))
        self.store_capacity = store
        self.store_bound_mib = 1.1 * need / 2**20  # what the run may hold: N*K unrolls + 2 weight copies + 10 %
        if need > store:
            if self._own_ray:
                ray.shutdown()
            raise ConfigError(
                f"{cfg.num_actors} actors x {IN_FLIGHT} unrolls in flight of {self.unroll_bytes / 2**20:.1f} MiB need {need / 2**20:,.0f} MiB "
                f"of Ray object store, but the cluster has {store / 2**20:,.0f} MiB: use fewer --num-actors or --envs-per-actor, or start Ray with "
                f"a larger --object-store-memory"
            )
        self.num_slots = max(cfg.buffer_slots, cfg.batch_slots + IN_FLIGHT * cfg.num_actors)
        self._flat, slots = zip(*(packed_unroll(layout) for _ in range(self.num_slots)))
        self._slots = list(slots)
        self.router = _Router(self.num_slots)
        self.weights = _Weights()
        self.actors: list[Any] = []
        self.restarts = 0
        self._restart_times: list[collections.deque[float]] = [collections.deque() for _ in range(cfg.num_actors)]
        self._down = [False] * cfg.num_actors  # a death counted, no unroll from it since
        self._counted = [0] * cfg.num_actors  # deaths counted per actor (checked against Ray's restart count)
        self._retry_at = [0.0] * cfg.num_actors  # while down: when to ask it again (Ray fails calls at once during a restart)
        self._failures = [0] * cfg.num_actors
        self._arrived = [0.0] * cfg.num_actors  # per actor: when its last unroll arrived, and the mean time between them
        self._period = [0.0] * cfg.num_actors
        self._in_flight: dict[Any, tuple[int, int]] = {}  # request ref -> (actor, learner slot)
        self.max_in_flight = 0
        self._fatal: BaseException | None = None
        self._stop = threading.Event()
        self._pump: threading.Thread | None = None
        self.nodes: list[dict[str, Any]] = []
        self.store_mib = float("nan")  # Ray object store held by live references, cluster-wide (read by the pump every few seconds)
        self.store_used_mib = float("nan")  # ... plus unreferenced objects the store has not evicted yet
        self.spilled_mib = 0.0

    def start(self) -> None:
        import ray

        remote = ray.remote(ActorHost).options(num_cpus=1, max_restarts=-1, max_task_retries=0, max_concurrency=IN_FLIGHT + 1, scheduling_strategy="SPREAD")
        self.actors = [remote.remote(i, self.cfg, self._spec, self._core_size) for i in range(self.cfg.num_actors)]
        self.nodes = ray.get([a.where.remote() for a in self.actors], timeout=self.cfg.timeout)
        addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        for i, where in enumerate(self.nodes):
            where["address"] = addresses.get(where["node_id"], "?")
            log.info("actor %d (%s) pid %d on node %s at %s", i, actor_label(self.cfg, i), where["pid"], where["node_id"][:12], where["address"])
        self._pump = threading.Thread(target=self._run_pump, name="pronghorn-ray-pump", daemon=True)
        self._pump.start()

    def unroll_slots(self) -> list[Unroll]:
        return self._slots

    def _run_pump(self) -> None:
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

        last_read = 0.0
        try:
            while not self._stop.is_set():
                if time.monotonic() - last_read > 2.0:
                    self._read_store()
                    last_read = time.monotonic()
                self._submit()
                if not self._in_flight:
                    time.sleep(0.01)
                    continue
                late = [p for p in self._period if p >= LATE_REQUEST_MIN_PERIOD]  # wake often enough to send them on time
                ready, rest = ray.wait(list(self._in_flight), num_returns=1, timeout=min([0.1] + [p / 8 for p in late]))
                if ready and rest:  # take every other result already here in the same pass: fewer wake-ups
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    ready += more
                for ref in ready:
                    actor, slot = self._in_flight.pop(ref)
                    try:
                        data, failures = ray.get(ref)
                    except (ActorDiedError, ActorUnavailableError, RayActorError) as exc:
                        self.router.free.put(slot)  # the unroll is lost whole; the slot goes back
                        self._actor_down(actor, exc)
                        continue
                    except RayTaskError as exc:
                        raise WorkerError(f"actor {actor} ({actor_label(self.cfg, actor)}) failed: {exc.cause or exc}") from None
                    del ref  # drop the reference now: the object store frees the unroll
                    self._flat[slot].numpy()[...] = data  # one copy: Ray's arrays are read-only views of the object store
                    self._failures[actor] = failures
                    now = time.monotonic()
                    if self._arrived[actor]:
                        gap, mean = now - self._arrived[actor], self._period[actor]
                        self._period[actor] = gap if not mean else 0.8 * mean + 0.2 * gap
                    self._arrived[actor] = now
                    if self._down[actor]:
                        self._down[actor] = False
                        log.info("actor %d (%s) delivers again", actor, actor_label(self.cfg, actor))
                    self.router.full.put(slot)
        except BaseException as exc:  # handed to the learner through check_health
            self._fatal = exc

    def _read_store(self) -> None:
        """Object store use from Ray's memory summary (an internal API: NaN if it changes)."""
        try:
            from ray._private.internal_api import memory_summary

            text = memory_summary(stats_only=True)
            # "Plasma memory usage 108 MiB, 62 objects, 1.53% full, 0.09% needed". "needed" is what referenced
            # objects take (what the run holds); "full" adds objects nobody refers to any more, which the
            # store keeps until it needs the room (measured here: Pong's superseded weights, ~100 MiB).
            used = re.search(r"Plasma memory usage ([\d.]+) MiB, \d+ objects, ([\d.]+)% full, ([\d.]+)% needed", text)
            spilled = re.search(r"Spilled ([\d.]+) MiB", text)
            capacity_mib = self.store_capacity / 2**20
            self.store_mib = float(used.group(3)) / 100 * capacity_mib if used else float("nan")
            self.store_used_mib = float(used.group(2)) / 100 * capacity_mib if used else float("nan")
            self.spilled_mib = float(spilled.group(1)) if spilled else 0.0
        except Exception:  # a diagnostic: never a reason to stop training
            self.store_mib = self.store_used_mib = float("nan")

    def _submit(self) -> None:
        if self.weights.version < 0:
            return  # the learner publishes its first weights after start(): a request needs them to act with
        per_actor = collections.Counter(a for a, _ in self._in_flight.values())
        now = time.monotonic()
        for i, actor in enumerate(self.actors):
            if self._down[i] and now < self._retry_at[i]:
                continue
            while per_actor[i] < IN_FLIGHT and (per_actor[i] == 0 or second_request_due(now, self._period[i], self._arrived[i])):
                try:
                    slot = self.router.free.get_nowait()
                except queue.Empty:
                    return  # backpressure: no learner-side slot to receive another unroll
                version, weights = self.weights.current()
                ref = actor.unroll.remote(version, weights)
                self._in_flight[ref] = (i, slot)
                per_actor[i] += 1
        self.max_in_flight = max(self.max_in_flight, len(self._in_flight))

    def _ray_restarts(self, i: int) -> int | None:
        """How many times Ray has restarted actor i (GCS's actor table, an internal API: None if it changes)."""
        try:
            from ray._private.state import state

            return int(state.actor_table(self.actors[i]._actor_id.hex())["NumRestarts"])
        except Exception:  # a diagnostic source: without it, a death counts once until the actor delivers
            return None

    def _actor_down(self, i: int, exc: BaseException) -> None:
        now = time.monotonic()
        self._retry_at[i] = now + 0.5
        # Every failed request of a dead actor lands here: the others in flight when it died, and each retry
        # while Ray restarts it ("unavailable"). Ray's own restart count tells a new death from those, also
        # when the restarted actor dies again before delivering anything (a crash loop counts every time).
        restarts = self._ray_restarts(i)
        if self._down[i]:
            if restarts is None or restarts <= self._counted[i]:
                return
            new = restarts - self._counted[i]
        else:
            new = 1  # noticed now; Ray's count may not have moved yet
        self._counted[i] = max(self._counted[i] + new, restarts or 0)
        self._down[i] = True
        times = self._restart_times[i]
        times.extend([now] * new)
        while times and now - times[0] > _CRASH_WINDOW:
            times.popleft()
        node = self.nodes[i]["node_id"][:12] if i < len(self.nodes) else "?"
        if len(times) > self.cfg.max_actor_restarts:
            raise WorkerError(
                f"actor {i} ({actor_label(self.cfg, i)}) died {len(times)} times within {_CRASH_WINDOW:.0f} s: a crash loop; raise --max-actor-restarts"
            )
        self.restarts += new
        log.warning(
            "actor %d (%s, node %s) died (%s); its unrolls in flight are dropped, Ray restarts it", i, actor_label(self.cfg, i), node, type(exc).__name__
        )

    def check_health(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def alive(self) -> int:
        return sum(not d for d in self._down)

    def full_occupancy(self) -> float:
        return self.router.full.qsize() / self.num_slots

    def env_failures(self) -> int:
        return sum(self._failures)

    def metrics(self) -> dict[str, float]:
        """Runtime columns for metrics.csv: actors delivering, and unroll requests in flight (at most N*K)."""
        return {
            "actors_alive": float(self.alive()),
            "unrolls_in_flight": float(len(self._in_flight)),
            "unrolls_in_flight_max": float(self.max_in_flight),
            "object_store_mib": self.store_mib,
            "object_store_used_mib": self.store_used_mib,
            "object_store_bound_mib": self.store_bound_mib,
            "object_store_spilled_mib": self.spilled_mib,
        }

    def close(self, timeout: float = 5.0) -> None:
        import ray

        self._stop.set()
        if self._pump is not None:
            self._pump.join(timeout)
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass
        self.actors, self._in_flight = [], {}
        if self._own_ray:
            ray.shutdown()
