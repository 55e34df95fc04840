"""One line per intermediate evaluation (`val @400: accuracy 0.52 (chance 0.50)`), so a newcomer sees whether a
run is learning without reading metrics.jsonl. The chance level sits beside every accuracy: 0.52 means nothing
until one knows that guessing gives 0.50."""

from __future__ import annotations


def task_chance(task) -> float | None:
    """The accuracy of guessing for the trainer's task, where it has one: an algorithmic sequence task's own
    uniform-prediction accuracy, a reasoning task's majority-label share of its validation rows."""
    sequence_task = getattr(task, "task", None)
    if hasattr(sequence_task, "chance_accuracy"):
        return float(sequence_task.chance_accuracy)
    val_rows = getattr(task, "val_rows", None)
    if val_rows is not None and hasattr(val_rows, "labels") and len(val_rows):
        positive = float(val_rows.labels.float().mean())
        return max(positive, 1.0 - positive)
    return None


def validation_line(step: int, result: dict, chance: float | None) -> str:
    """`val @STEP: ...` for a sequence task (final-state accuracy, by length where there are several lengths),
    a reasoning task (accuracy) or a language model (loss and bits per unit)."""
    chance_text = "" if chance is None else f" (chance {chance:.2f})"
    if "final_state_accuracy" in result:
        by_length = {key.rsplit("_", 1)[1]: value for key, value in result.items()
                     if key.startswith("final_state_accuracy_")}
        lengths = ", ".join(f"{length}: {value:.2f}" for length, value in by_length.items())
        detail = f"; by length {lengths}" if len(by_length) > 1 else ""
        return f"val @{step}: accuracy {result['final_state_accuracy']:.2f}{chance_text}{detail}"
    if "accuracy" in result:
        return f"val @{step}: accuracy {result['accuracy']:.2f}{chance_text}"
    bits = [(key, value) for key, value in result.items() if key.startswith("bits_per_")]
    bits_text = f" ({bits[0][1]:.3f} bits/{bits[0][0].removeprefix('bits_per_')})" if bits else ""
    return f"val @{step}: loss {result['loss']:.4f}{bits_text}"


__all__ = ["task_chance", "validation_line"]
