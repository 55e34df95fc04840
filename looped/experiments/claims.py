"""Claims tables: each claim of a paper, the paper's figure, ours from the committed CSVs, and a verdict by a rule
written in the table's header.

A study lists its claims as `Claim`s; `write_claims` renders them to `<results>/claims.md`. Every verdict comes
from one of the rules below, applied to the per-seed values read from the study's CSVs, so the table cannot
drift from the results it summarises (a test regenerates every committed claims table and compares).

The rules are pessimistic on purpose: a claim is "yes" only when it still holds one sample SD away from our mean
(on the unfavourable side) over at least `MIN_SEEDS` seeds, so a rerun on another machine that moves one seed by
a point or two does not flip it. The margin column says how far from the bar that pessimistic value is.

    yes     the condition holds at mean - SD (a lower bound) / mean + SD (an upper bound), n >= 3 seeds
    partly  it holds at the mean only, or with fewer than 3 seeds
    no      it fails at the mean
    not run no finished run of a row the claim needs
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..eval.stats import mean_sd
from ..io import atomic_write_text
from .render import left, markdown, table

MIN_SEEDS = 3
VERDICTS = ("yes", "partly", "no", "not run")  # best first: a claim of several conditions gets the worst


@dataclass(frozen=True)
class Evidence:
    """What one condition of a claim found: ours as text, the verdict, and the margin to the bar."""

    ours: str
    verdict: str
    margin: str = ""


@dataclass(frozen=True)
class Claim:
    """One claim of a paper: its statement, the paper's figure, how ours is selected, and its conditions."""

    statement: str
    paper: str
    selection: str  # which runs, checkpoint and metric "ours" reads (for DRT: which step budgets)
    conditions: Callable[[], Sequence[Evidence]]

    def evidence(self) -> tuple[str, str, str]:
        """(ours, verdict, margin): the conditions' texts joined, the worst verdict."""
        found = list(self.conditions())
        verdict = max((e.verdict for e in found), key=VERDICTS.index) if found else "not run"
        texts = list(dict.fromkeys(e.ours for e in found))  # two conditions on one row name it once ...
        ours = [t for t in texts if not any(t != other and t in other for other in texts)]  # ... or inside another
        return "; ".join(ours), verdict, "; ".join(e.margin for e in found if e.margin)


# --- reading the CSVs ----------------------------------------------------------------------------------------
def read_rows(path: Path) -> list[dict]:
    """The finished rows of a study CSV (status ok or no status column); [] when the file is missing."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f) if row.get("status", "ok") in ("ok", "")]


def values(rows: list[dict], column: str, scale: float = 1.0, **match) -> list[float]:
    """`column` of every row whose columns equal `match` (compared as text), times `scale`, in row order."""
    return [float(row[column]) * scale for row in rows
            if all(str(row.get(k)) == str(v) for k, v in match.items()) and row.get(column, "") != ""]


# --- the rules -----------------------------------------------------------------------------------------------
def number(values_: Sequence[float], digits: int = 1, unit: str = "") -> str:
    """'mean ± SD (n=k)', the one way a claims table writes our figure."""
    mean, sd = mean_sd(values_)
    return f"{mean:.{digits}f}{unit}" + (f" ± {sd:.{digits}f}" if sd is not None else "") + f" (n={len(values_)})"


def _graded(holds_at_mean: bool, holds_pessimistic: bool, n: int) -> str:
    if not holds_at_mean:
        return "no"
    return "yes" if holds_pessimistic and n >= MIN_SEEDS else "partly"


def at_least(name: str, xs: Sequence[float], bar: float, *, digits: int = 1, unit: str = "") -> Evidence:
    """`name` reaches `bar`: yes when mean - SD >= bar over >= 3 seeds."""
    if not xs:
        return Evidence(f"{name}: not run", "not run")
    mean, sd = mean_sd(xs)
    low = mean - (sd or 0.0)
    return Evidence(f"{name} {number(xs, digits, unit)}", _graded(mean >= bar, low >= bar, len(xs)),
                    f"{name} mean − SD {low:.{digits}f} vs ≥ {bar:.{digits}f} ({low - bar:+.{digits}f})")


def at_most(name: str, xs: Sequence[float], bar: float, *, digits: int = 1, unit: str = "") -> Evidence:
    """`name` stays at or below `bar`: yes when mean + SD <= bar over >= 3 seeds."""
    if not xs:
        return Evidence(f"{name}: not run", "not run")
    mean, sd = mean_sd(xs)
    high = mean + (sd or 0.0)
    return Evidence(f"{name} {number(xs, digits, unit)}", _graded(mean <= bar, high <= bar, len(xs)),
                    f"{name} mean + SD {high:.{digits}f} vs ≤ {bar:.{digits}f} ({bar - high:+.{digits}f})")


def ahead(better: tuple[str, Sequence[float]], worse: tuple[str, Sequence[float]], *, higher_is_better: bool = True,
          digits: int = 1, unit: str = "") -> Evidence:
    """Row `better` beats row `worse`: yes when the two means are separated by one SD of each (the intervals
    mean ± SD do not overlap) with >= 3 seeds each; partly when only the means are in order."""
    (a, xs), (b, ys) = better, worse
    if not xs or not ys:
        missing = a if not xs else b
        return Evidence(f"{missing}: not run", "not run")
    sign = 1.0 if higher_is_better else -1.0
    (ma, sa), (mb, sb) = mean_sd(xs), mean_sd(ys)
    gap = sign * (ma - mb)
    separation = gap - (sa or 0.0) - (sb or 0.0)
    verdict = _graded(gap > 0, separation > 0, min(len(xs), len(ys)))
    return Evidence(f"{a} {number(xs, digits, unit)} vs {b} {number(ys, digits, unit)}", verdict,
                    f"{a} − {b} {ma - mb:+.{digits}f}{unit} ({separation:+.{digits}f} beyond both SDs)")


def halfway(chance: float, paper: float) -> float:
    """The default bar of a claim against chance: halfway from chance to the paper's figure."""
    return (chance + paper) / 2


def not_run(what: str) -> Evidence:
    return Evidence(f"{what}: not run", "not run")


# --- rendering -----------------------------------------------------------------------------------------------
HEADER = """Verdicts, by one rule for every claim (looped/experiments/claims.py): **yes** = the claim's condition still
holds one sample SD from our mean on the unfavourable side (mean - SD for a lower bound, mean + SD for an upper
bound; for "A ahead of B", the intervals mean ± SD do not overlap) with at least {min_seeds} seeds; **partly** = it
holds at the mean only, or with fewer seeds; **no** = it fails at the mean; **not run** = a row it needs has no
finished run. A claim of several conditions takes its worst verdict. Unless a claim says otherwise its bar is
halfway between chance and the paper's figure, so "yes" means most of the paper's effect is there at our scale.
The margin is the pessimistic value minus the bar: a small margin is a knife edge a rerun may cross."""


# one line per judged claim: (claim, Evidence of all its conditions)
CLAIM_COLUMNS = [left("claim", lambda j: j[0].statement), left("paper", lambda j: j[0].paper),
                 left("ours", lambda j: j[1].ours), left("verdict", lambda j: f"**{j[1].verdict}**"),
                 left("margin", lambda j: j[1].margin), left("selection", lambda j: j[0].selection)]


def claims_markdown(title: str, intro: str, claims: Sequence[Claim]) -> str:
    found = [(claim, Evidence(*claim.evidence())) for claim in claims]
    counts = {v: sum(e.verdict == v for _, e in found) for v in VERDICTS}
    return markdown([f"# {title}", "", intro.strip(), "", HEADER.format(min_seeds=MIN_SEEDS), "",
                     *table(CLAIM_COLUMNS, found), "", "Summary: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS)
                     + "."])


def machines_line(rows: list[dict]) -> str:
    """Which machines the finished rows ran on, with counts ("not recorded": rows written before the column, and
    rows of sessions 11-12 whose machine was dropped when they were copied from their worktree)."""
    counts: dict[str, int] = {}
    for row in rows:
        name = row.get("machine") or "not recorded"
        counts[name] = counts.get(name, 0) + 1
    return "Rows ran on: " + ", ".join(f"{name} ({n} rows)" for name, n in counts.items()) + "." if counts else ""


@dataclass(frozen=True)
class ClaimSet:
    """A paper's claims as its study declares them (StudySpec.claims): the engine writes `<results>/claims.md`
    after every report. `title` and `intro` may hold {scale}; `claims(out)` judges them from out's CSVs."""

    title: str
    intro: str
    claims: Callable[[Path], Sequence[Claim]]

    def document(self, out: Path, scale: str = "cpu") -> str:
        """claims.md of the study in `out`: its intro also names the machines the rows of results.csv ran on."""
        machines = machines_line(read_rows(Path(out) / "results.csv"))
        intro = self.intro.format(scale=scale) + ("\n\n" + machines if machines else "")
        return claims_markdown(self.title.format(scale=scale), intro, self.claims(Path(out)))

    def write(self, out: Path, scale: str = "cpu") -> Path:
        """Write `<out>/claims.md` (atomically) and return its path."""
        path = Path(out) / "claims.md"
        atomic_write_text(path, self.document(out, scale))
        return path


__all__ = ["Claim", "ClaimSet", "Evidence", "ahead", "at_least", "at_most", "claims_markdown", "halfway",
           "machines_line", "not_run", "number", "read_rows", "values"]
