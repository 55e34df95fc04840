"""`looped compare`, the report: the table (markdown, CSV, JSON), one verdict per matching, and three plots.

Everything here is rebuilt from the CSVs in OUT (results.csv, curves.csv, depth.csv) and OUT/plan.json, so a
report written while other processes still train shows every row finished so far.

Verdicts compare means over seeds: "workspace − transformer at equal params: −0.030 ± 0.020 bits/byte, 3 seeds".
The ± is the standard error of the difference of two independent means, sqrt(sd_a²/n_a + sd_b²/n_b) (unpaired:
the rows of one seed share the data order but not their initial weights); with one seed there is no SD and the
verdict says so.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from pathlib import Path

from ..eval.stats import mean_sd
from ..io import atomic_write_text
from .compare_plan import FLOPS_ROW, PLAIN, CompareOptions, run_config
from .render import Column, left, table

SUMMARY_COLUMNS = ["row", "arch", "seeds", "parameters", "updates", "train_flops", "bits_per_byte_mean",
                   "bits_per_byte_sd", "best_depth", "inference_flops_per_token", "decode_tokens_per_s",
                   "state_bytes_1024"]


def read_csv(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def ok_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("status", "ok") == "ok"]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def summarize(results: list[dict], row_order: list[str]) -> list[dict]:
    """One line per row over its finished seeds: bits/byte mean and SD, the medians of the rest."""
    out = []
    for row in row_order:
        runs = [r for r in ok_rows(results) if r["row"] == row]
        if not runs:
            continue
        mean, sd = mean_sd([float(r["bits_per_byte"]) for r in runs])
        depths = [int(r["best_depth"]) for r in runs if r.get("best_depth")]
        out.append({"row": row, "arch": runs[0]["arch"], "seeds": len(runs),
                    "parameters": int(runs[0]["parameters"]),
                    "updates": int(median([int(r["updates"]) for r in runs])),
                    "train_flops": median([float(r["train_flops"]) for r in runs]),
                    "bits_per_byte_mean": mean, "bits_per_byte_sd": sd,
                    "best_depth": int(median(depths)) if depths else None,
                    "inference_flops_per_token": float(runs[0]["inference_flops_per_token"]),
                    "decode_tokens_per_s": median([float(r["decode_tokens_per_s"]) for r in runs]),
                    "state_bytes_1024": int(runs[0]["state_bytes_1024"])})
    return out


def difference(a: dict, b: dict) -> tuple[float, float | None]:
    """Mean of a minus mean of b and its unpaired standard error (None when either row has one seed)."""
    diff = a["bits_per_byte_mean"] - b["bits_per_byte_mean"]
    if a["bits_per_byte_sd"] is None or b["bits_per_byte_sd"] is None:
        return diff, None
    return diff, math.sqrt(a["bits_per_byte_sd"] ** 2 / a["seeds"] + b["bits_per_byte_sd"] ** 2 / b["seeds"])


def verdict(a: dict, b: dict, matching: str) -> str:
    """One line: "a − b at equal <matching>: diff ± se bits/byte, n seeds" and what it says."""
    diff, se = difference(a, b)
    seeds = f"{a['seeds']} seed{'s' if a['seeds'] != 1 else ''}" if a["seeds"] == b["seeds"] else \
        f"{a['seeds']} and {b['seeds']} seeds"
    name_b = "plain" if b["row"] == PLAIN else f"plain with {b['updates']:,} updates" if b["row"] == FLOPS_ROW \
        else b["row"]
    signed = f"{diff:+.3f}".replace("-", "−")  # the minus sign, as the difference reads in the text
    if se is None:
        return f"{a['row']} − {name_b} at equal {matching}: {signed} bits/byte, {seeds} (no SD from one seed)"
    if abs(diff) <= 2 * se:
        meaning = "no difference beyond 2 standard errors"
    else:
        meaning = f"{a['row']} is {'better' if diff < 0 else 'worse'} (beyond 2 standard errors)"
    return f"{a['row']} − {name_b} at equal {matching}: {signed} ± {se:.3f} bits/byte, {seeds}; {meaning}"


def verdicts(summary: list[dict], match: list[str]) -> list[str]:
    """Every looped row against the plain row at equal parameters, and against the FLOP-matched plain row."""
    by_row = {s["row"]: s for s in summary}
    looped = [s for s in summary if s["row"] not in (PLAIN, FLOPS_ROW)]
    lines = []
    references = [("params", PLAIN, "params"), ("flops", FLOPS_ROW, "training FLOPs")]
    for key, reference, words in references:
        if key in match and reference in by_row:
            lines += [verdict(s, by_row[reference], words) for s in looped]
    return lines


def si(value: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g}"


def summary_columns(rounds: int) -> list[Column]:
    """The table of one compare: a summary row per line (`rounds`: the depth the looped rows trained at)."""
    def bits(s: dict) -> str:
        sd = "" if s["bits_per_byte_sd"] is None else f" ± {s['bits_per_byte_sd']:.4f}"
        return f"{s['bits_per_byte_mean']:.4f}{sd} (n={s['seeds']})"

    return [left("row", lambda s: s["row"]), Column("params", lambda s: f"{s['parameters']:,}"),
            Column("updates", lambda s: f"{s['updates']:,}"), Column("training FLOPs", lambda s: si(s["train_flops"])),
            left("held-out bits/byte", bits),
            Column("best depth", lambda s: f"{s['best_depth']} (trained {rounds})" if s["best_depth"] is not None
                   else "—"),
            Column("inference FLOPs/token", lambda s: si(s["inference_flops_per_token"])),
            Column("decode tokens/s", lambda s: f"{s['decode_tokens_per_s']:,.0f}"),
            Column("state bytes @1,024", lambda s: f"{s['state_bytes_1024']:,}")]


def table_markdown(summary: list[dict], floor: dict, options: CompareOptions, lines: list[str]) -> str:
    columns = summary_columns(options.rounds)
    # a compressor's floor: its bits/byte alone, the other cells empty
    body = [*table(columns, summary), *(f"| {name} (floor) | | | | {bits:.4f} | | | | |"
                                        for name, bits in floor.get("rates", {}).items())]
    notes = (f"\nHeld-out bits/byte: mean ± SD over seeds at each run's best checkpoint (lowest of its "
             f"~20 held-out evaluations) on the first {options.heldout_bytes:,} held-out bytes; best depth: the "
             f"test-time rounds with the lowest held-out score (1 .. 2 x trained); inference FLOPs per token at "
             f"context {options.context} (compute ledger); decode tokens/s: batch 1, incremental state, median "
             f"of 3; state bytes: the decoding state of one sequence after 1,024 tokens (ledger). Floor: the "
             f"same held-out bytes under standard compressors.\n")
    verdict_text = "\n".join(f"* {line}" for line in lines) or "* (no verdict yet: a row is missing)"
    return ("# looped compare\n\n" + "\n".join(body) + "\n" + notes +
            f"\n## Verdicts\n\n{verdict_text}\n\n± is the standard error of the difference of means, unpaired: "
            f"sqrt(sd_a²/n_a + sd_b²/n_b).\n")


def summary_csv(summary: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows([{k: "" if s[k] is None else s[k] for k in SUMMARY_COLUMNS} for s in summary])
    return buffer.getvalue()


def compressor_floor(out: Path, plan: dict) -> dict:
    """gzip / bzip2 / xz bits per byte of the held-out bytes the runs are scored on, cached in OUT."""
    from ..data import load_streams
    from ..eval.compressors import compressor_bits_per_byte

    data = load_streams(run_config(plan, PLAIN, 11).data).heldout.astype("uint8").tobytes()
    digest = hashlib.sha256(data).hexdigest()
    path = Path(out) / "compressors.json"
    if path.exists():
        cached = json.loads(path.read_text())
        if cached.get("sha256") == digest:
            return cached
    floor = {"sha256": digest, "bytes": len(data), "rates": compressor_bits_per_byte(data)}
    atomic_write_text(path, json.dumps(floor, indent=2) + "\n")
    return floor


def write_report(out: Path, plan: dict) -> list[str]:
    """Rewrite table.md / table.csv / table.json and the plots from OUT's CSVs; returns the verdict lines."""
    out = Path(out)
    options = CompareOptions(**plan["options"])
    results = read_csv(out / "results.csv")
    summary = summarize(results, options.rows)
    lines = verdicts(summary, options.match)
    floor = compressor_floor(out, plan)
    atomic_write_text(out / "table.md", table_markdown(summary, floor, options, lines))
    atomic_write_text(out / "table.csv", summary_csv(summary))
    atomic_write_text(out / "table.json", json.dumps({"rows": summary, "verdicts": lines, "floor": floor,
                                                      "plan": plan}, indent=2) + "\n")
    if summary:
        from .compare_plots import plot_all

        plot_all(out, plan, summary, heldout_curve(out), read_csv(out / "depth.csv"), floor)
    return lines


def heldout_curve(out: Path) -> list[dict]:
    """curves.csv's held-out evaluations. A comparison written while the engine's training-loss table was also
    called `curves` (6c3296c to 60f08c8) holds those logs there too, rows with no FLOPs and no score: left out."""
    return [r for r in read_csv(out / "curves.csv") if r["bits_per_byte"] and r["flops"]]
