"""Synthetic tasks of seeds 002 (reasoning) and 003 (algorithmic length generalisation)."""

from .base import ReasoningBatch, SequenceBatch, TaskError, get_task, register_task, rng_for, task_names

__all__ = ["ReasoningBatch", "SequenceBatch", "TaskError", "get_task", "register_task", "rng_for", "task_names"]
