"""Result files shared by the recipes: an append-only CSV keyed by run, written atomically."""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

from ..train.checkpoint import atomic_write_text


class ResultTable:
    """Rows of a CSV identified by `key` columns; adding a row replaces one with the same key."""

    def __init__(self, path: Path, columns: list[str], key: list[str]):
        self.path, self.columns, self.key = Path(path), columns, key
        self.rows: list[dict] = []
        if self.path.exists():
            with open(self.path, newline="") as f:
                self.rows = list(csv.DictReader(f))

    def has(self, **key) -> bool:
        return any(all(str(row[k]) == str(v) for k, v in key.items()) for row in self.rows)

    def add(self, row: dict) -> None:
        key = {k: str(row[k]) for k in self.key}
        self.rows = [r for r in self.rows if {k: str(r[k]) for k in self.key} != key]
        self.rows.append({c: row.get(c, "") for c in self.columns})
        self.save()

    def save(self) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, buffer.getvalue())


def mean_sd(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def format_mean_sd(values: list[float], digits: int = 4) -> str:
    mean, sd = mean_sd(values)
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "") + f" (n={len(values)})"
