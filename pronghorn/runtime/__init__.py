"""The only code that knows about processes, shared memory and process-level tuning."""

from pronghorn.runtime.local import LocalRuntime, WorkerError
from pronghorn.runtime.tuning import tune_learner_process

__all__ = ["LocalRuntime", "WorkerError", "tune_learner_process"]
