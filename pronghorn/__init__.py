"""pronghorn: IMPALA actor-learner reinforcement learning in PyTorch."""

from pronghorn.config import Config, ConfigError
from pronghorn.train import TrainResult, train

__all__ = ["Config", "ConfigError", "TrainResult", "train"]
__version__ = "0.1.0"
