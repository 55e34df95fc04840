"""Bits per byte of standard compressors: the bar a byte-level language model should clear.

    python -m looped.eval.compressors                 # the KJV held-out books (what `looped quickstart` scores)
    python -m looped.eval.compressors FILE [FILE ...] # any files

A compressor's rate is 8 x compressed size / raw size, at its strongest setting: gzip -9 (zlib level 9 in a gzip
container), bzip2 -9 and xz -9e, all from Python's standard library, so the numbers are reproducible anywhere
Python runs. A model's held-out bits/byte (seed 000 eq. 9) is the same unit: both are the code length per byte
of the text, except that the model does not score the first byte of each 513-byte block (it has no context).
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import lzma
import sys
from pathlib import Path

COMPRESSORS = {
    "gzip -9": lambda data: gzip.compress(data, compresslevel=9, mtime=0),
    "bzip2 -9": lambda data: bz2.compress(data, compresslevel=9),
    "xz -9e": lambda data: lzma.compress(data, preset=9 | lzma.PRESET_EXTREME),
}


def compressor_bits_per_byte(data: bytes) -> dict[str, float]:
    """{compressor: bits per byte} for `data` (non-empty)."""
    if not data:
        raise ValueError("cannot rate an empty text")
    return {name: 8 * len(compress(data)) / len(data) for name, compress in COMPRESSORS.items()}


def kjv_heldout_bytes() -> bytes:
    """The held-out books of the embedded KJV corpus, exactly the bytes `looped quickstart` scores."""
    from ..data import load_streams
    from ..data.corpora import DataConfig

    return bytes(load_streams(DataConfig(corpus="kjv")).heldout.tolist())


def format_rates(rates: dict[str, float]) -> str:
    return ", ".join(f"{name} {bits:.3f}" for name, bits in rates.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m looped.eval.compressors", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="files to rate (default: the KJV held-out books)")
    args = parser.parse_args(argv)
    sources = [(path, Path(path).read_bytes()) for path in args.files] or [("KJV held-out books", kjv_heldout_bytes())]
    for name, data in sources:
        print(f"{name} ({len(data):,} bytes): {format_rates(compressor_bits_per_byte(data))} bits/byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
