"""Hub-hosted corpus files: pinned to a commit, fetched through huggingface_hub's cache (offline here: a local
folder laid out as the Hub cache), still checked against our own SHA-256, HF_HUB_OFFLINE respected."""

from __future__ import annotations

import hashlib

import pytest

from hub_cache import add_commit, offline_cache

hf = pytest.importorskip("huggingface_hub", reason="the hub extra is not installed (pip install 'looped[hub]')")

from looped.data.corpora import DataError  # noqa: E402
from looped.data.download import DATASETS, HubFile, RemoteFile, download  # noqa: E402

CONTENT = b"pinned corpus bytes\n" * 50


@pytest.fixture
def cache(tmp_path, monkeypatch):
    return offline_cache(tmp_path, monkeypatch)


def hub_dataset(monkeypatch, revision: str, sha256: str, size: int = len(CONTENT)):
    remote = RemoteFile("corpus.txt", f"https://huggingface.co/datasets/me/toy/resolve/{revision}/sub/corpus.txt",
                        size, sha256, HubFile("me/toy", revision, "sub/corpus.txt"))
    monkeypatch.setitem(DATASETS, "toyhub", (remote,))


def test_the_official_hub_files_are_pinned_to_a_commit():
    hosted = [r for files in DATASETS.values() for r in files if "huggingface.co" in r.url]
    assert hosted and all(r.hub is not None and len(r.hub.revision) == 40 for r in hosted)
    assert all(f"/resolve/{r.hub.revision}/" in r.url and "/resolve/main/" not in r.url for r in hosted)


def test_pinned_file_comes_from_the_hub_cache_and_is_verified(cache, monkeypatch, tmp_path):
    commit = add_commit(cache, "me/toy", {"sub/corpus.txt": CONTENT}, repo_type="dataset")
    hub_dataset(monkeypatch, commit, hashlib.sha256(CONTENT).hexdigest())
    (path,) = download("toyhub", tmp_path / "data", log=lambda _: None)
    assert path == tmp_path / "data" / "corpus.txt" and path.read_bytes() == CONTENT
    assert not list((tmp_path / "data").glob("*.part"))


def test_our_checksum_still_guards_the_hub_bytes(cache, monkeypatch, tmp_path):
    commit = add_commit(cache, "me/toy", {"sub/corpus.txt": CONTENT}, repo_type="dataset")
    hub_dataset(monkeypatch, commit, "0" * 64)
    with pytest.raises(DataError, match="corrupt: sha256"):
        download("toyhub", tmp_path / "data", log=lambda _: None)
    assert not (tmp_path / "data" / "corpus.txt").exists()


def test_offline_and_not_cached_is_one_line(cache, monkeypatch, tmp_path):
    hub_dataset(monkeypatch, "a" * 40, hashlib.sha256(CONTENT).hexdigest())
    with pytest.raises(DataError) as err:
        download("toyhub", tmp_path / "data", log=lambda _: None)
    message = str(err.value)
    assert "\n" not in message and "HF_HUB_OFFLINE" in message and "corpus.txt" in message
