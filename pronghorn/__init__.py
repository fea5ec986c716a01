"""pronghorn: IMPALA actor-learner reinforcement learning in PyTorch."""

from typing import TYPE_CHECKING, Any

from pronghorn.config import Config, ConfigError

if TYPE_CHECKING:
    from pronghorn.training import TrainResult, train

__all__ = ["Config", "ConfigError", "TrainResult", "train"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # train and TrainResult import torch (about 2 s): loading them on first use lets `pronghorn train --help`
    # and a bad flag answer without it.
    if name in ("train", "TrainResult"):
        from pronghorn import training

        return getattr(training, name)
    raise AttributeError(f"module 'pronghorn' has no attribute {name!r}")
