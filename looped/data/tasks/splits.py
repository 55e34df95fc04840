"""The fixed data of the seed 003 tasks (data seeds, held-out sets, the indexed training stream) now live beside
the task class in algorithmic.py, so each task owns its sets (`task.test_sets()`, `task.validation_sets()`);
this module keeps the old import path."""

from .algorithmic import (TaskLike, fixed_set, heldout_keys, replace_excluded, split_seed, test_sets,  # noqa: F401
                          train_batch, validation_sets)

__all__ = ["TaskLike", "fixed_set", "heldout_keys", "replace_excluded", "split_seed", "test_sets", "train_batch",
           "validation_sets"]
