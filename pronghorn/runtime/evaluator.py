"""Evaluation during training: one spawned process plays the greedy policy of checkpoints it is handed.

It runs `pronghorn evaluate`'s code (`evaluate.evaluate`) on the checkpoint the learner just wrote, at a
lower CPU priority than the actors (`EVAL_NICE_BELOW_ACTORS` further) and with one torch thread, so on a
busy machine it takes what the learner and actors leave. One evaluation is in flight at a time: a request
made while one runs is refused and the caller logs the skip (queuing them would let evaluations fall ever further behind training).

Requests and results travel over one pipe, not multiprocessing queues: a queue holds named semaphores
in /dev/shm, and a SIGKILL of the whole process group (the resource tracker with it) leaves them there.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from typing import Any

from pronghorn.logs import Evaluation
from pronghorn.runtime.tuning import limit_threads, lower_priority

# The actors run --actor-nice below the learner; evaluation goes 10 further (19 at most), so it weighs
# against an actor about as an actor weighs against the learner.
EVAL_NICE_BELOW_ACTORS = 10


def _serve(logdir: str, episodes: int, video: bool, seed: int, nice: int, conn: Any) -> None:
    from pronghorn.runtime.local import die_with_parent

    die_with_parent()
    try:
        import setproctitle

        setproctitle.setproctitle("pronghorn-evaluator")
    except ImportError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner decides when to stop
    lower_priority(nice)  # evaluation yields the cores to training
    limit_threads(1)
    from pronghorn.evaluate import evaluate

    while True:
        try:
            request = conn.recv()
        except EOFError:  # the learner is gone
            return
        if request is None:
            return
        path, frames = request
        video_path = os.path.join(logdir, "eval", f"video-{frames:012d}.mp4") if video else None
        try:
            if video_path:
                os.makedirs(os.path.dirname(video_path), exist_ok=True)
            summary = evaluate(logdir, path, episodes, greedy=True, video=video_path, seed=seed + frames)
            returns = {level: float(r["return"]["mean"]) for level, r in summary["levels"].items()}
            result = Evaluation(frames, returns, episodes, video_path, None)
        except Exception as exc:  # reported to the learner, which logs it and trains on
            result = Evaluation(frames, {}, episodes, None, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        try:
            conn.send(result)
        except OSError:  # the learner is gone
            return


class Evaluator:
    """The evaluation process and the pipe to it."""

    def __init__(self, logdir: str, episodes: int, video: bool, seed: int, actor_nice: int):
        ctx = mp.get_context("spawn")
        self._conn, theirs = ctx.Pipe(duplex=True)
        nice = min(19, actor_nice + EVAL_NICE_BELOW_ACTORS)
        self._process = ctx.Process(target=_serve, args=(logdir, episodes, video, seed, nice, theirs), daemon=True)
        self._process.start()
        theirs.close()  # the child has its own copy: this end closed, its death reads as end of file here
        self.busy = False

    def submit(self, checkpoint_path: str, frames: int) -> bool:
        """Ask for an evaluation of this checkpoint; False (nothing asked) while one is still running."""
        if self.busy:
            return False
        try:
            self._conn.send((checkpoint_path, frames))
        except OSError:  # the process is gone: poll() says so
            pass
        self.busy = True
        return True

    def poll(self, timeout: float = 0.0) -> list[Evaluation]:
        """The finished evaluation, if any (waiting up to `timeout` s for the one in flight)."""
        if not self.busy:
            return []
        try:
            if self._conn.poll(timeout):
                result = self._conn.recv()
                self.busy = False
                return [result]
        except (EOFError, OSError):  # its end closed: it died
            self._process.join(2.0)
        if self._process.is_alive():
            return []
        self.busy = False
        return [Evaluation(-1, {}, 0, None, f"the evaluation process died (exit code {self._process.exitcode})")]

    def close(self) -> None:
        try:
            self._conn.send(None)
        except OSError:
            pass
        self._process.join(5.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(2.0)
        self._conn.close()
