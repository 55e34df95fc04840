"""Training: config, trainer (single process and torchrun), schedules, checkpoints."""

from .checkpoint import CheckpointError, load_model
from .config import OptimConfig, RunConfig, TrainConfig, load_run_config
from .trainer import Trainer, TrainingError

__all__ = ["CheckpointError", "load_model", "OptimConfig", "RunConfig", "TrainConfig", "load_run_config",
           "Trainer", "TrainingError"]
