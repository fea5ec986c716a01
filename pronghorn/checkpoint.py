"""Atomic checkpoints: write to a temporary file in the same folder, fsync, rename; keep the last k.

`<logdir>/checkpoints/ckpt-<frames>.pt` plus a `latest` file naming the newest complete one (written
the same way, so it never points at a half-written file).
"""

from __future__ import annotations

import os
import re
from typing import Optional

import torch

_NAME = re.compile(r"ckpt-(\d+)\.pt$")


def _atomic_write(path: str, write) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def save(logdir: str, state: dict, frames: int, keep: int = 3) -> str:
    folder = os.path.join(logdir, "checkpoints")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"ckpt-{frames:012d}.pt")
    _atomic_write(path, lambda f: torch.save(state, f))
    _atomic_write(os.path.join(folder, "latest"), lambda f: f.write(os.path.basename(path).encode()))
    for old in sorted(p for p in os.listdir(folder) if _NAME.match(p))[:-keep]:
        os.unlink(os.path.join(folder, old))
    return path


def latest(logdir: str) -> Optional[str]:
    folder = os.path.join(logdir, "checkpoints")
    try:
        with open(os.path.join(folder, "latest")) as f:
            path = os.path.join(folder, f.read().strip())
    except FileNotFoundError:
        return None
    return path if os.path.exists(path) else None


def load(path: str) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)
