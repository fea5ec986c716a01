"""The only code that knows about processes, shared memory and process-level tuning."""

from typing import TYPE_CHECKING, Any

from pronghorn.runtime.tuning import tune_learner_process

if TYPE_CHECKING:
    from pronghorn.runtime.local import LocalRuntime, WorkerError

__all__ = ["LocalRuntime", "WorkerError", "tune_learner_process"]


def __getattr__(name: str) -> Any:
    # The local runtime imports torch: loaded on first use, so that `pronghorn train` can set what torch's
    # OpenMP reads when it loads (tuning.quiet_openmp) after parsing its flags.
    if name in ("LocalRuntime", "WorkerError"):
        from pronghorn.runtime import local

        return getattr(local, name)
    raise AttributeError(f"module 'pronghorn.runtime' has no attribute {name!r}")
