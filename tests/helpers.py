"""Leak checks shared by every test that starts workers.

Only what a test itself started counts: its child processes, actors orphaned from the processes it
ran (reparented to init, or whose parent is one of `owners`), and shared-memory segments named after
this process or one of `owners` (segments are named pronghorn-<creator pid>-...).
"""

import csv
import importlib.util
import os
import sys
import time

import psutil

from pronghorn.runtime.shm import SHM_PREFIX


def pronghorn_segments(owners=()) -> list[str]:
    prefixes = tuple(f"{SHM_PREFIX}{pid}-" for pid in (os.getpid(), *owners))
    try:
        return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefixes))
    except FileNotFoundError:
        return []


def worker_processes(owners=()) -> list[psutil.Process]:
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline()):
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    for p in psutil.process_iter(["cmdline", "ppid"]):
        try:
            title = (p.info["cmdline"] or [""])[0]
            if title.startswith("pronghorn-actor") and (p.info["ppid"] == 1 or p.info["ppid"] in owners) and p not in found:
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


def assert_no_leaks(owners=(), timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        procs = worker_processes(owners)
        segments = pronghorn_segments(owners)
        if not procs and not segments:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"leaked processes {[(p.pid, p.name()) for p in procs]} and segments {segments}")
        time.sleep(0.2)


CLI = [sys.executable, "-m", "pronghorn.cli"]
ENV = {**os.environ, "PYTHONPATH": os.getcwd()}  # spawned actors import tests.flaky_env from the repo root


def train_command(logdir, *flags) -> list[str]:
    """`pronghorn train` into logdir, quiet, with a metrics row every 0.5 s (what the process tests watch), plus flags."""
    return CLI + ["train", "--logdir", str(logdir), "--no-progress", "--log-interval", "0.5", *flags]


def start_training(logdir, *flags, **popen):
    """`pronghorn train` (`train_command`) in a child process, its output piped as text; popen: more Popen arguments."""
    import subprocess

    return subprocess.Popen(train_command(logdir, *flags), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, **popen)


def wait_for_file(path, proc, timeout: float = 120.0) -> None:
    """Until `path` exists (a run's metrics.csv: its first row is written, it is training). Fails the test, with
    the end of the run's stderr, if `proc` exits first or the file is not there within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            err = proc.communicate()[1] or ""
            raise AssertionError(f"the run exited with {proc.returncode} before {path} appeared: {str(err)[-2000:]}")
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout:.0f} s"
        time.sleep(0.2)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_cli(args, timeout: float = 300):
    """Run `pronghorn ARGS` to completion; returns (process, stdout, stderr). The process keeps its pid for leak checks."""
    import subprocess

    proc = subprocess.Popen(CLI + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, out, err


def synthetic_batches(n, T=5, B=4, seed=0, obs_shape=(4,), obs_dtype=None, num_actions=2, core_size=0):
    """Random time-major batches [T+1, B] for learner tests (10% episode ends); CartPole-shaped by default.
    uint8 observations (images) are uniform over 0..255."""
    import numpy as np
    import torch

    from pronghorn.records import Unroll, unroll_spec

    g = torch.Generator().manual_seed(seed)
    spec = unroll_spec(T, B, obs_shape, obs_dtype or np.float32, num_actions, core_size)
    out = []
    for _ in range(n):
        fields = {}
        for name, (shape, dtype) in zip(Unroll._fields, spec):
            t = torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
            if t.dtype == torch.uint8:
                t.random_(0, 256, generator=g)
            elif t.is_floating_point():
                t.normal_(generator=g)
            fields[name] = t
        fields["action"] = torch.randint(0, num_actions, fields["action"].shape, generator=g)
        fields["terminated"] = torch.rand(fields["terminated"].shape, generator=g) < 0.1
        out.append(Unroll(**fields))
    return out


def read_wandb_records(path):
    """The protobuf records of a W&B offline run file (run-<id>.wandb), in order.

    The file is ":W&B" + magic + version (7 bytes), then LevelDB-log framing: 32 KiB blocks of records,
    each with a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last piece)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    block, pos, raw, parts = 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            raw.append(chunk)
        elif kind == 2:
            parts = chunk
        elif kind == 3:
            parts += chunk
        elif kind == 4:
            raw.append(parts + chunk)
    records = []
    for item in raw:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(item)
        records.append(record)
    return records


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module (benchmarks/ is not a package)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "benchmarks", f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
