"""Leak checks shared by every test that starts workers.

Only what a test itself started counts: its child processes, actors orphaned from the processes it
ran (reparented to init, or whose parent is one of `owners`), and shared-memory segments named after
this process or one of `owners` (segments are named pronghorn-<creator pid>-...).
"""

import csv
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


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
