"""Where a run writes: a new folder, or a named one reopened to resume (a previous run's files moved aside, never deleted)."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import time

from pronghorn import checkpoint
from pronghorn.config import Config, ConfigError
from pronghorn.logs import trim_csv

log = logging.getLogger("pronghorn")


def new_run_dir(base: str) -> str:
    """A new directory named base, else base-2, base-3, ...: a run's without --logdir, or the previous-<time>
    folder a restart moves old files into. Both names carry a time stamp to the second, which two runs (or
    restarts) can share; mkdir succeeds for one process only, so none takes over another's directory."""
    for n in itertools.count(1):
        path = base if n == 1 else f"{base}-{n}"
        try:
            os.makedirs(path)
            return path
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def move_aside(logdir: str, why: str) -> str:
    """Move every file of a previous run into <logdir>/previous-<time>/ (never delete)."""
    target = new_run_dir(os.path.join(logdir, time.strftime("previous-%Y%m%d-%H%M%S")))
    for name in os.listdir(logdir):
        if not name.startswith("previous-"):
            shutil.move(os.path.join(logdir, name), os.path.join(target, name))
    log.warning("%s: moved the files already in %s to %s", why, logdir, target)
    return target


def prepare_logdir(cfg: Config) -> tuple[str, str | None, dict | None]:
    """Create or reopen the logdir; returns (logdir, checkpoint path, checkpoint state) to resume from."""
    logdir = cfg.resolved_logdir(time.strftime("%Y%m%d-%H%M%S"))
    try:
        if cfg.logdir:
            os.makedirs(logdir, exist_ok=True)  # a named logdir is reopened: that is how a run resumes
        else:
            logdir = new_run_dir(logdir)
        has_run = any(not n.startswith("previous-") for n in os.listdir(logdir))
        if has_run and cfg.restart:
            move_aside(logdir, "--restart")
        path, state = checkpoint.load_latest(logdir)
        if state is None and has_run and not cfg.restart:
            move_aside(logdir, "no usable checkpoint to resume from")
        if state is not None:
            conflicts = cfg.resume_conflicts(state["config"])
            if conflicts:
                raise ConfigError(
                    f"cannot resume {logdir}: {'; '.join(conflicts)}. Use the run's values to resume, or add --restart to start anew (the old files are kept)"
                )
        frames = int(state["learner"]["frames"]) if state else 0
        for name in ("episodes.csv", "metrics.csv"):
            trim_csv(os.path.join(logdir, name), frames)
        with open(os.path.join(logdir, "config.json"), "w") as f:
            f.write(cfg.to_json() + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write to logdir {logdir!r} ({exc.strerror}): pass a writable --logdir") from None
    return logdir, path, state
