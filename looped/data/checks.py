"""Checks that a train / held-out pair of texts is scored on equal terms, before any training.

A held-out file that differs from the training text in form rather than content makes every model look worse by
the same invented amount: CRLF line endings on one side only cost a byte-level model ~0.3 bits/byte (it never
saw a carriage return), a byte-order mark on one side is a symbol it never saw, and a held-out file that repeats
training lines measures memory, not modelling. `check_split` finds these and returns them as structured
findings, so that `looped data info` prints them and a comparison can refuse to start on them::

    findings = check_split(train_bytes, heldout_bytes, train_files=[...], heldout_files=[...])
    for finding in findings:
        print(finding.kind, finding.message)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

BOM = b"\xef\xbb\xbf"
# Total-variation distance between byte histograms above which the texts differ in kind: different books of the
# KJV are 0.019 apart (train vs held-out); CRLF against LF line endings alone add ~0.02.
TV_THRESHOLD = 0.08
OVERLAP_THRESHOLD = 0.01  # share of held-out line bytes that also occur as training lines
MIN_OVERLAP_LINE = 16  # shorter lines ("", "}", "Chapter 1") repeat in any text and say nothing about leakage
TOP_BYTES = 5


@dataclass
class Finding:
    """One mismatch between the training and held-out text: `kind` names the check, `message` says it in one
    line, `details` holds the numbers behind it."""

    kind: str  # "line_endings" | "bom" | "byte_histogram" | "overlap"
    message: str
    details: dict = field(default_factory=dict)


def line_ending_counts(data: bytes) -> dict[str, int]:
    """How many CRLF, lone LF and lone CR line endings `data` holds."""
    crlf = data.count(b"\r\n")
    return {"crlf": crlf, "lf": data.count(b"\n") - crlf, "cr": data.count(b"\r") - crlf}


def line_ending_style(counts: dict[str, int]) -> str:
    """"CRLF", "LF", "CR", "mixed" or "none" (no line break at all)."""
    used = [name.upper() for name, count in counts.items() if count]
    return used[0] if len(used) == 1 else "mixed" if used else "none"


def check_line_endings(train: bytes, heldout: bytes) -> Finding | None:
    counts = {"train": line_ending_counts(train), "heldout": line_ending_counts(heldout)}
    styles = {side: line_ending_style(c) for side, c in counts.items()}
    if "none" in styles.values() or styles["train"] == styles["heldout"]:
        return None
    return Finding("line_endings", f"line endings differ: train {styles['train']}, held-out {styles['heldout']} "
                                   f"(convert one side, e.g. `dos2unix`, or every model pays for the difference)",
                   {"styles": styles, "counts": counts})


def check_bom(train_files: list[bytes], heldout_files: list[bytes]) -> Finding | None:
    """A UTF-8 byte-order mark at the start of the files of one side only."""
    marked = {side: sum(f.startswith(BOM) for f in files) for side, files in
              (("train", train_files), ("heldout", heldout_files))}
    if not train_files or not heldout_files or bool(marked["train"]) == bool(marked["heldout"]):
        return None
    side = "train" if marked["train"] else "held-out"
    return Finding("bom", f"a UTF-8 byte-order mark (EF BB BF) starts {side} file(s) only "
                          f"({marked['train']} of {len(train_files)} train, {marked['heldout']} of "
                          f"{len(heldout_files)} held-out)", {"files_with_bom": marked})


def byte_histogram(data: bytes) -> np.ndarray:
    """Relative frequency of each of the 256 byte values."""
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256).astype(np.float64)
    return counts / max(counts.sum(), 1.0)


def check_histograms(train: bytes, heldout: bytes, threshold: float = TV_THRESHOLD) -> tuple[float, Finding | None]:
    """(total-variation distance between the byte histograms, a finding when it is above `threshold`)."""
    p, q = byte_histogram(train), byte_histogram(heldout)
    distance = 0.5 * float(np.abs(p - q).sum())
    if distance <= threshold:
        return distance, None
    top = np.argsort(-np.abs(p - q))[:TOP_BYTES]
    differing = [{"byte": symbol_name(int(b)), "train": float(p[b]), "heldout": float(q[b])} for b in top]
    shown = ", ".join(f"{d['byte']} {100 * d['train']:.2f}% vs {100 * d['heldout']:.2f}%" for d in differing)
    return distance, Finding("byte_histogram",
                             f"byte frequencies differ: total-variation distance {distance:.3f} > {threshold} "
                             f"(train vs held-out: {shown})", {"tv_distance": distance, "top_bytes": differing})


def symbol_name(symbol: int) -> str:
    """A byte as readers know it: 'e', '\\r', 0xC3."""
    text = chr(symbol)
    return repr(text) if symbol < 128 and (text.isprintable() or text in "\r\n\t") else f"0x{symbol:02X}"


def content_lines(data: bytes) -> list[bytes]:
    """The lines of `data` without their line endings or surrounding blanks, long enough to mean something."""
    lines = (line.strip() for line in data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"))
    return [line for line in lines if len(line) >= MIN_OVERLAP_LINE]


def check_overlap(train: bytes, heldout: bytes, threshold: float = OVERLAP_THRESHOLD) -> tuple[float, Finding | None]:
    """(share of held-out line bytes in lines that also occur in the training text, a finding above
    `threshold`). Lines are compared whatever their line endings; short lines are left out."""
    heldout_lines = content_lines(heldout)
    total = sum(len(line) for line in heldout_lines)
    if not total:
        return 0.0, None
    seen = set(content_lines(train))
    repeated = [line for line in heldout_lines if line in seen]
    share = sum(len(line) for line in repeated) / total
    if share <= threshold:
        return share, None
    return share, Finding("overlap", f"{len(repeated):,} of {len(heldout_lines):,} held-out lines "
                                     f"({100 * share:.1f}% of their bytes) also occur in the training text: the "
                                     f"score would measure memory", {"share": share, "lines": len(repeated)})


def check_split(train: bytes, heldout: bytes, *, train_files: list[bytes] | None = None,
                heldout_files: list[bytes] | None = None) -> list[Finding]:
    """Every mismatch between the training and held-out text (empty when they are alike). The BOM check needs
    the separate files of each side (`*_files`); a single file split in two has nothing to compare."""
    findings = [check_line_endings(train, heldout), check_bom(train_files or [], heldout_files or []),
                check_histograms(train, heldout)[1], check_overlap(train, heldout)[1]]
    return [f for f in findings if f is not None]
