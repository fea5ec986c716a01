"""Evaluation during training: one spawned process plays the greedy policy of checkpoints it is handed.

It runs `pronghorn evaluate`'s code (`evaluate.evaluate`) on the checkpoint the learner just wrote, at a
lower CPU priority (nice 10) and with one torch thread, so on a busy machine it takes what the learner and
actors leave. One evaluation is in flight at a time: a request made while one runs is refused and the
caller logs the skip (queuing them would let evaluations fall ever further behind training).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
from typing import Any

from pronghorn.logs import Evaluation


def _serve(logdir: str, episodes: int, video: bool, seed: int, requests: Any, results: Any) -> None:
    from pronghorn.runtime.local import die_with_parent

    die_with_parent()
    try:
        import setproctitle

        setproctitle.setproctitle("pronghorn-evaluator")
    except ImportError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner decides when to stop
    os.nice(10)  # evaluation yields the cores to training
    import torch

    torch.set_num_threads(1)
    from pronghorn.evaluate import evaluate

    while True:
        request = requests.get()
        if request is None:
            return
        path, frames = request
        video_path = os.path.join(logdir, "eval", f"video-{frames:012d}.mp4") if video else None
        try:
            if video_path:
                os.makedirs(os.path.dirname(video_path), exist_ok=True)
            summary = evaluate(logdir, path, episodes, greedy=True, video=video_path, seed=seed + frames)
            returns = {level: float(r["return"]["mean"]) for level, r in summary["levels"].items()}
            results.put(Evaluation(frames, returns, episodes, video_path, None))
        except Exception as exc:  # reported to the learner, which logs it and trains on
            results.put(Evaluation(frames, {}, episodes, None, f"{type(exc).__name__}: {' '.join(str(exc).split())}"))


class Evaluator:
    """The evaluation process and its two queues."""

    def __init__(self, logdir: str, episodes: int, video: bool, seed: int):
        ctx = mp.get_context("spawn")
        self._requests = ctx.Queue()
        self._results = ctx.Queue()
        self._process = ctx.Process(target=_serve, args=(logdir, episodes, video, seed, self._requests, self._results), daemon=True)
        self._process.start()
        self.busy = False

    def submit(self, checkpoint_path: str, frames: int) -> bool:
        """Ask for an evaluation of this checkpoint; False (nothing asked) while one is still running."""
        if self.busy:
            return False
        self._requests.put((checkpoint_path, frames))
        self.busy = True
        return True

    def poll(self, timeout: float = 0.0) -> list[Evaluation]:
        """Finished evaluations (waiting up to `timeout` s for the one in flight)."""
        done = []
        try:
            while True:
                done.append(self._results.get(timeout=timeout) if timeout and self.busy else self._results.get_nowait())
                self.busy = False
                timeout = 0.0
        except queue.Empty:
            pass
        if self.busy and not self._process.is_alive():
            self.busy = False
            done.append(Evaluation(-1, {}, 0, None, f"the evaluation process died (exit code {self._process.exitcode})"))
        return done

    def close(self) -> None:
        try:
            self._requests.put(None)
        except (OSError, ValueError):
            pass
        self._process.join(5.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(2.0)
        for q in (self._requests, self._results):
            q.close()
            q.cancel_join_thread()
