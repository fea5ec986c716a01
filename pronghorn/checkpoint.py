"""Atomic checkpoints: write to a temporary file in the same folder, fsync, rename; keep the last k.

`<logdir>/checkpoints/ckpt-<frames>.pt` plus a `latest` file naming the newest complete one (written
the same way, so it never names a half-written file). Loading walks from the newest to older ones and
skips, with a warning naming it, any file that is truncated or not a pronghorn checkpoint.
"""

from __future__ import annotations

import logging
import os
import re

import torch

log = logging.getLogger("pronghorn.checkpoint")

FORMAT = 1
_NAME = re.compile(r"ckpt-(\d+)\.pt$")
REQUIRED = ("format", "config", "learner", "rng", "stats")


def folder(logdir: str) -> str:
    return os.path.join(logdir, "checkpoints")


def _fsync_dir(path: str) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def atomic_write(path: str, write) -> None:
    """Write a file so that readers see either the old content or the whole new one, never a part."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)  # a failed write (disk full) leaves the previous file untouched
    _fsync_dir(os.path.dirname(path) or ".")


def removed_logdir(logdir: str) -> str:
    """The one message for a logdir that vanished mid-run (checkpoints and logs both report it)."""
    return f"logdir {logdir} was removed while training: nothing more can be saved there; rerun to start again"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written; the previous one is intact."""


def save(logdir: str, state: dict, frames: int, keep: int = 3) -> str:
    """Write a checkpoint; raises CheckpointError (naming the intact previous one) if it cannot."""
    if not os.path.isdir(logdir):
        raise CheckpointError(removed_logdir(logdir))
    out = folder(logdir)
    try:
        # mkdir, not makedirs: if the logdir vanishes between the check above and here, makedirs would
        # quietly recreate it; mkdir fails and the message below says what happened.
        if not os.path.isdir(out):
            os.mkdir(out)
        return _save(out, state, frames, keep)
    except OSError as exc:
        if not os.path.isdir(logdir):
            raise CheckpointError(removed_logdir(logdir)) from None
        previous = candidates(logdir)
        raise CheckpointError(
            f"could not write a checkpoint in {out} ({exc.strerror or exc}); the previous one ({previous[0] if previous else 'none'}) is intact"
        ) from None


def _save(out: str, state: dict, frames: int, keep: int) -> str:
    path = os.path.join(out, f"ckpt-{frames:012d}.pt")
    atomic_write(path, lambda f: torch.save({"format": FORMAT, **state}, f))
    atomic_write(os.path.join(out, "latest"), lambda f: f.write(os.path.basename(path).encode()))
    for old in sorted(p for p in os.listdir(out) if _NAME.match(p))[:-keep]:
        os.unlink(os.path.join(out, old))
    return path


def candidates(logdir: str) -> list[str]:
    """Checkpoint files, newest (most frames) first.

    Every ckpt-*.pt is complete when it appears (written to a temporary file, fsynced, renamed), so the
    newest wins even over the one `latest` names: a kill between the two renames in `_save` leaves `latest`
    one checkpoint behind, and trusting it would throw away the last interval's training."""
    out = folder(logdir)
    if not os.path.isdir(out):
        return []
    return sorted((os.path.join(out, p) for p in os.listdir(out) if _NAME.match(p)), reverse=True)


def load(path: str) -> dict:
    """Load one checkpoint; raises ValueError if it is not a complete pronghorn checkpoint."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # truncated zip, unpickling error, ...: all mean 'unusable'
        raise ValueError(f"cannot read {path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict) or any(key not in state for key in REQUIRED):
        raise ValueError(f"{path} is not a pronghorn checkpoint (missing {[k for k in REQUIRED if k not in state]})")
    if state["format"] != FORMAT:
        raise ValueError(f"{path} has checkpoint format {state['format']}, this pronghorn reads {FORMAT}")
    return state


def load_latest(logdir: str) -> tuple[str | None, dict | None]:
    """The newest usable checkpoint in `logdir`, skipping (with a warning) any that cannot be read."""
    for path in candidates(logdir):
        try:
            return path, load(path)
        except ValueError as exc:
            log.warning("skipping unusable checkpoint: %s; falling back to an older one", exc)
    return None, None
