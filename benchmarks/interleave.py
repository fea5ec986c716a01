"""Training and the component limit timed in turns: the limit is timed while training is paused.

`benchmarks/throughput.py --interleave N` uses this. Training runs as `pronghorn train` would, in processes of
its own (its own session); every window of training is followed by a pause, in which its processes are
stopped (SIGSTOP) and the components are timed on the cores they leave idle; then training goes on
(SIGCONT). N pauses, N + 1 windows. The frames/s counts the windows only: metrics.csv rows come every
`log_interval` seconds, and an interval between two rows that spans a pause is left out.

Why: on these machines the speed of the same work drifts by tens of percent over seconds (CartPole's best,
3-s rows of one run: 1.36M to 1.96M frames/s). Timed once before and once after a run, the limit and the
run sample different stretches of that drift; timed in turns, both sample the same stretches.

  .venv/bin/python benchmarks/interleave.py CONFIG.pickle    # the training process itself (what interleaved() starts)
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import itertools
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def window_rate(rows: list[dict[str, str]], log_interval: float) -> tuple[float, float]:
    """(frames, seconds) summed over consecutive metrics.csv rows whose interval spans no pause.

    A row is written at the first update ending `log_interval` seconds after the one before, so an interval
    runs a little over `log_interval`; one that spans a pause runs the pause longer. Pauses last seconds (the
    components' timing), so 2.5 x log_interval tells them apart."""
    frames = seconds = 0.0
    for before, after in itertools.pairwise(rows):
        dt = float(after["time"]) - float(before["time"])
        if 0 < dt <= 2.5 * log_interval:
            frames += float(after["frames"]) - float(before["frames"])
            seconds += dt
    return frames, seconds


def read_rows(logdir: str) -> list[dict[str, str]]:
    try:
        with open(os.path.join(logdir, "metrics.csv")) as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


def _group(pgid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if os.getpgid(p.pid) == pgid:
                found.append(p)
    return found


@contextlib.contextmanager
def paused(proc: subprocess.Popen, timeout: float = 5.0) -> Iterator[None]:
    """Every process of the training run (the learner leads its session; the actors are in it) stopped, then resumed.

    A signal takes effect when its process next enters the kernel: the timing waits until each one shows as
    stopped, so no training runs beside it."""
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = []
            for p in _group(proc.pid):
                with contextlib.suppress(psutil.Error):
                    states.append(p.status())
            if all(state in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE) for state in states):
                break
            time.sleep(0.01)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGCONT)


def _stop(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM stops `pronghorn train` as Ctrl-C does (its actors stop, its shared memory goes); SIGKILL the
    whole session after `timeout` seconds, or if the learner is gone and left processes behind."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGCONT)  # a stopped process would not see the SIGTERM until resumed
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _why(proc: subprocess.Popen, err: Any) -> str:
    """The run's exit code (or that it is still running) and the last line it wrote to stderr."""
    err.seek(0)
    tail = err.read().strip().splitlines()[-1:] or ["no output"]
    return f"{'exit code ' + str(proc.returncode) if proc.poll() is not None else 'still starting'}: {tail[0]}"


def interleaved(
    cfg: Any,
    time_components: Callable[[], tuple[dict[str, float], str]],
    pauses: int,
    window_s: float,
    log_interval: float = 1.0,
    start_timeout: float = 300.0,
) -> tuple[float, list[dict[str, float]], str]:
    """Training frames/s over the windows, the components' costs timed in each pause, and the stepper timed.

    cfg: the run's Config (its total_frames, logdir, log_interval and progress are replaced); time_components:
    one timing of the components (throughput.Components.time). The training processes inherit this one's
    environment (throughput.py's OMP_WAIT_POLICY included)."""
    with tempfile.TemporaryDirectory() as tmp:
        logdir = os.path.join(tmp, "run")
        run_cfg = dataclasses.replace(cfg, total_frames=10**15, logdir=logdir, progress=False, log_interval=log_interval, stop_at_return=1e12)
        config_path = os.path.join(tmp, "config.pickle")
        with open(config_path, "wb") as f:
            pickle.dump(run_cfg, f)
        with open(os.path.join(tmp, "stderr"), "w+") as err:
            proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), config_path], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
            )
            try:
                # Warm-up: processes start, the first weights go out, a compiled learner compiles. Windows begin
                # once two rows have come (the second covers a full interval of training).
                deadline = time.monotonic() + start_timeout
                while len(read_rows(logdir)) < 2:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"training did not start ({_why(proc, err)})")
                    time.sleep(0.2)
                first = len(read_rows(logdir)) - 1
                costs, stepper = [], ""
                for _ in range(pauses):
                    time.sleep(window_s)
                    with paused(proc):
                        timing, stepper = time_components()
                    costs.append(timing)
                time.sleep(window_s)
                if proc.poll() is not None:  # a run that ended early would leave windows without training in them
                    raise RuntimeError(f"training stopped before its last window ({_why(proc, err)})")
            finally:
                _stop(proc)
        frames, seconds = window_rate(read_rows(logdir)[first:], log_interval)
    if seconds <= 0:
        raise RuntimeError("no metrics.csv interval fell inside a window: lengthen the windows")
    return frames / seconds, costs, stepper


def _run(config_path: str) -> int:
    """The training process: `pronghorn train`'s steps, with the Config from `config_path`."""
    sys.path.insert(0, ROOT)
    with open(config_path, "rb") as f:
        cfg = pickle.load(f)  # imports pronghorn.config, which does not load torch
    from pronghorn.cli import prepare_learner_process

    prepare_learner_process(cfg)  # before torch loads; SIGTERM then stops training as Ctrl-C does
    from pronghorn.training import train

    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(_run(sys.argv[1]))
