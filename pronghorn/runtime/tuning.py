"""Process-level settings for the learner and actors (see shared MACHINE-FACTS: malloc page faults, threads)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pronghorn.config import Config

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def tune_malloc() -> bool:
    """Keep glibc from mmapping and unmapping the learner's large activations every step.

    Same effect as MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=<huge> in the environment, but it works
    after the process has started. Measured here: the shallow CNN train step 489 ms -> 269 ms.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1
        ok &= libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
        return bool(ok)
    except (OSError, AttributeError):
        return False  # not glibc: nothing to tune


def limit_threads(torch_threads: int) -> None:
    """torch's ops on `torch_threads` threads and numpy's BLAS on one, in this process.

    Every process sets both (actors and the evaluator 1 each, the learner its share of the cores), so that
    processes x threads stays near the core count. numpy's BLAS matters since the MLP's acting step
    multiplies in numpy (acting.py, also in the learner process's inference server): OpenBLAS splits a
    product over every core from about 512 x 64 x 64 (an actor's step at 512 envs), and the second thread
    would take the core another process runs on. Only the BLAS numpy loaded is limited (threadpoolctl's
    "blas"); torch's OpenMP pool is set by torch.set_num_threads alone.
    """
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(torch_threads)
    threadpool_limits(1, user_api="blas")


def learner_thread_count(cfg: Config, on_cpu: bool, cores: int) -> int:
    """Torch threads for the learner: 1 with --deterministic, --learner-threads where given, else one per core
    the actors leave (at least 1), and at least two for the deep ResNet on CPU.

    The deep ResNet's convolutions are large enough that a second thread pays even on a core an actor runs on:
    Pong, 2 cores, 2 actors (2026-12-06, alternated pairs, with `quiet_openmp`): 1.15-1.26x the frames/s of one
    thread. The smaller networks' products are not: in pairs the same day the shallow CNN ran 0.91x and the Nature
    CNN 0.87-0.92x, and CartPole's and MinAtar's best were slower too (docs/performance.md, "The learner's threads";
    docs/throughput_log.md)."""
    if cfg.deterministic:
        return 1
    if cfg.learner_threads:
        return cfg.learner_threads
    left = max(1, cores - cfg.num_actors)
    return max(left, min(2, cores)) if on_cpu and cfg.model == "deep" else left


def quiet_openmp(cfg: Config, cores: int, environ: MutableMapping[str, str] = os.environ) -> bool:
    """Before torch loads: OpenMP's threads sleep between parallel regions where the learner's threads share
    cores with actors. Returns whether it set OMP_WAIT_POLICY (a value already set is kept).

    libgomp reads OMP_WAIT_POLICY once, when torch loads it, so this runs before the first `import torch`;
    `auto` devices count as CPU here (torch would be needed to tell). A spinning OpenMP thread runs at the
    learner's priority, above the actors', and takes the time an actor needs: the deep ResNet's two learner
    threads 1.09-1.15x one thread's frames/s with libgomp's default spinning, 1.15-1.26x sleeping (2026-12-06)."""
    threads = learner_thread_count(cfg, on_cpu=cfg.device != "cuda", cores=cores)
    if threads < 2 or threads + cfg.num_actors <= cores or "OMP_WAIT_POLICY" in environ:
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def tune_learner_process(title: str = "pronghorn-learner") -> None:
    tune_malloc()
    try:
        import setproctitle

        setproctitle.setproctitle(title)
    except ImportError:
        pass


def lower_priority(nice: int) -> None:
    """Run this thread, and the threads it starts from now on, `nice` steps below the learner.

    Every actor waits on the learner (for free slots), so on cores shared by both the learner should win:
    with equal priority the scheduler gives each of 3 processes on 2 cores an equal share, the learner
    falls behind, both actors wait for a free slot and a core goes idle. On Linux niceness is per thread,
    so this is called before the actor starts any (envpool's, OpenCV's), which inherit it.
    """
    if nice > 0:
        try:
            os.nice(nice)
        except OSError:  # raising niceness is always allowed on Linux; elsewhere, run as we are
            pass


def actor_core(cfg: Config, index: int, levels: Sequence[str]) -> int | None:
    """The core actor `index` is pinned to (--pin-actors), or None to leave it to the scheduler.

    `auto` pins where the actor's environments step on a worker thread of their own (ale-py's vector env for
    Atari, envpool): unpinned, the scheduler wakes that thread on the other core at every step and the actor's
    thread waits for it there, each step's data crossing cores. Pinned, the two take turns on one core. Pong on
    2 cores (2026-12-06, docs/performance.md, "Actors pinned to cores"): the defaults 1.12-1.15x the frames/s, two actors of 16
    on envpool 1.05-1.12x; Acrobot on envpool 1.00-1.05x; CartPole's defaults, whose vector env steps in the
    actor's own thread, 0.90-0.95x; MinAtar in bfloat16 1.02-1.03x."""
    if cfg.pin_actors == "off" or not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if cfg.pin_actors == "auto":
        backend = cfg.backend_for(levels)
        worker_thread = backend == "envpool" or (backend == "vector" and all(level.startswith("ALE/") for level in levels))
        if not worker_thread or cfg.num_actors > len(cores):
            return None
    return cores[index % len(cores)]


def pin_to_core(core: int | None) -> None:
    """Run this process's thread, and the threads it starts from now on, on `core` only (None: anywhere)."""
    if core is not None:
        try:
            os.sched_setaffinity(0, {core})
        except OSError:  # a core taken away since the run started: leave the placement to the scheduler
            pass
