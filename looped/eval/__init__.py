"""Evaluation."""

from .lm import evaluate_lm

__all__ = ["evaluate_lm"]
