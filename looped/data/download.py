"""Downloading the official corpus files, verified, without ever leaving a partial file.

Each file is streamed to ``<name>.part`` while its SHA-256 is computed, checked against
the known size and checksum, and only then renamed to its final name (an atomic rename
on the same filesystem). Files already present and matching are skipped.

Where the checksums come from (none is invented; a file without a published checksum
gets ``sha256=None`` and the digest of its first download is recorded in
``CHECKSUMS.json`` next to the files):

* ``enwik8.zip``: size 36,445,475 bytes from Matt Mahoney's page
  http://mattmahoney.net/dc/textdata.html (which also gives the unzipped ``enwik8``:
  100,000,000 bytes, MD5 a1fa5ffddb56f4953e226637dabbb36a). The page gives no digest of
  the zip itself; its SHA-256 below is the value pinned independently by many public
  projects that download this URL.
* WikiText-103 raw-v1 Parquet shards: sizes and SHA-256 are the Git-LFS object ids of
  the files in Hugging Face ``Salesforce/wikitext`` at commit b08601e0 ("Convert dataset
  to Parquet (#8)", the last commit touching ``wikitext-103-raw-v1/`` on main).
* TinyStoriesV2-GPT4 text files: the train SHA-256 is shown as the Git-LFS object id on
  the Hugging Face ``roneneldan/TinyStories`` file page; sizes and the valid SHA-256 are
  the values recorded by public projects that verified their downloads. The revision
  pinned below (f54c09fd) is the snapshot public projects' Hub caches hold; the SHA-256
  check, not the revision, is what guarantees the bytes.

The Hugging-Face-hosted files are fetched at those pinned revisions, not from ``main``.
With ``pip install 'looped[hub]'`` they go through huggingface_hub: the shared Hub cache
(a second download is a cache hit), resumption of an interrupted download from its
partial blob, HF_HUB_OFFLINE (cache only) and HF_ENDPOINT (a mirror). Without it, or
for other hosts, they stream over plain HTTP (an interruption restarts the file).
"""

import hashlib
import http.client
import importlib.util
import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .corpora import DataError

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60
CHECKSUMS_FILE = "CHECKSUMS.json"
TINYSTORIES_MAX_TRAIN_BYTES = 250_000_000  # the paper's training cap

_WIKITEXT = ("Salesforce/wikitext", "b08601e04326c79dfdd32d625aee71d232d685c3", "wikitext-103-raw-v1/")
_TINYSTORIES = ("roneneldan/TinyStories", "f54c09fd23315a6f9c86f9dc80f725de7d8f9c64", "")


@dataclass(frozen=True)
class HubFile:
    """Where a file lives on the Hugging Face Hub, pinned to one commit."""

    repo_id: str
    revision: str  # a full commit hash: the checksums below belong to this commit
    path: str
    repo_type: str = "dataset"


@dataclass(frozen=True)
class RemoteFile:
    """One official file: where to get it and how to recognise the right bytes."""

    filename: str
    url: str
    size: int | None
    sha256: str | None
    hub: HubFile | None = None  # set for Hugging-Face-hosted files (fetched through huggingface_hub if installed)


def _on_hub(source: tuple[str, str, str], filename: str, size: int, sha256: str) -> RemoteFile:
    """A file of a Hub dataset repository (repo, pinned commit, folder); the URL is pinned to the commit too."""
    repo_id, revision, folder = source
    return RemoteFile(filename, f"https://huggingface.co/datasets/{repo_id}/resolve/{revision}/{folder}{filename}",
                      size, sha256, HubFile(repo_id, revision, folder + filename))


DATASETS: dict[str, tuple[RemoteFile, ...]] = {
    "enwik8": (
        RemoteFile(
            "enwik8.zip",
            "http://mattmahoney.net/dc/enwik8.zip",
            36_445_475,
            "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc",
        ),
    ),
    "wikitext103": (
        _on_hub(_WIKITEXT, "train-00000-of-00002.parquet", 156_987_808,
                "74da360f23826045b3e6ac6375411fdb15f003030aa74f2596ed08b857cb9212"),
        _on_hub(_WIKITEXT, "train-00001-of-00002.parquet", 157_088_770,
                "ba090ac30dbf5461e8dcbdd1a1b8e6f3cf9c2c756d64f0c1220450acd514f720"),
        _on_hub(_WIKITEXT, "validation-00000-of-00001.parquet", 657_209,
                "204929b7ff9d6184953f867dedb860e40aa69c078fc1e54b3baaa8fb28511c4c"),
        _on_hub(_WIKITEXT, "test-00000-of-00001.parquet", 732_610,
                "5f1bea067869d04849c0f975a2b29c4ff47d867f484f5010ea5e861eab246d91"),
    ),
    "tinystories": (
        _on_hub(_TINYSTORIES, "TinyStoriesV2-GPT4-train.txt", 2_227_753_162,
                "6418d412de72888f52b5142c761ac21a582f7d1166f0bfbdb5f03ccfdec90443"),
        _on_hub(_TINYSTORIES, "TinyStoriesV2-GPT4-valid.txt", 22_502_601,
                "6874bae9a4c1a4e7edcf0e53b86c17817e9cf881fc75ff2368da457b80c0585d"),
    ),
}

Opener = Callable[..., Any]  # called as opener(url, timeout=...), returns a readable context manager
Log = Callable[[str], None]


def _log_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _files_of(name: str) -> tuple[RemoteFile, ...]:
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    return DATASETS[name]


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _read_recorded(dest_dir: Path) -> dict[str, str]:
    """Checksums recorded by earlier downloads of files with no published checksum."""
    path = dest_dir / CHECKSUMS_FILE
    if not path.is_file():
        return {}
    try:
        recorded = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        raise DataError(f"{path}: not a valid JSON checksum record; delete it to start over") from None
    return recorded if isinstance(recorded, dict) else {}


def _record_checksum(dest_dir: Path, filename: str, digest: str, log: Log) -> None:
    recorded = _read_recorded(dest_dir)
    recorded[filename] = digest
    path = dest_dir / CHECKSUMS_FILE
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    log(f"{filename}: no published checksum; recorded sha256 {digest} in {path}")


def _mismatch(path: Path, remote: RemoteFile, expected_sha: str | None) -> str | None:
    """Why the file at `path` is not `remote` (None if it matches)."""
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        return f"size {size:,} bytes, expected {remote.size:,}"
    if expected_sha is not None:
        actual = sha256_of(path)
        if actual != expected_sha:
            return f"sha256 {actual}, expected {expected_sha}"
    return None


def _fetch(remote: RemoteFile, part: Path, dest_dir: Path, opener: Opener) -> None:
    """Stream `remote` into `part`; network problems become a one-line DataError."""
    try:
        with opener(remote.url, timeout=TIMEOUT_S) as response, part.open("wb") as out:
            headers = getattr(response, "headers", None)
            length = headers.get("Content-Length") if headers is not None else None
            total = int(length) if length and str(length).isdigit() else remote.size
            # disable=None: no bar when stderr is not a terminal (logs, CI).
            with tqdm(total=total, unit="B", unit_scale=True, desc=remote.filename, disable=None) as bar:
                while chunk := response.read(CHUNK_BYTES):
                    out.write(chunk)
                    bar.update(len(chunk))
    except urllib.error.HTTPError as err:
        raise _network_error(remote.url, f"HTTP {err.code} {err.reason}", dest_dir) from None
    except urllib.error.URLError as err:
        raise _network_error(remote.url, str(err.reason), dest_dir) from None
    except (OSError, http.client.HTTPException) as err:
        raise _network_error(remote.url, str(err) or type(err).__name__, dest_dir) from None


def _network_error(url: str, reason: str, dest_dir: Path) -> DataError:
    return DataError(
        f"could not download {url}: {reason} (no internet access? fetch the file by hand into {dest_dir})"
    )


def _fetch_from_hub(remote: RemoteFile, part: Path) -> None:
    """The pinned file through the Hub cache (resumable, shared, HF_HUB_OFFLINE-aware), linked or copied to `part`."""
    from .. import hub

    try:
        cached = hub.download_file(remote.hub.repo_id, remote.hub.path, remote.hub.revision,
                                   repo_type=remote.hub.repo_type).resolve()
    except hub.HubError as err:
        raise DataError(f"could not download {remote.filename}: {err}") from None
    part.unlink(missing_ok=True)
    try:
        os.link(cached, part)  # same filesystem: no second copy of a 2.2 GB file
    except OSError:
        shutil.copyfile(cached, part)


def _hub_available() -> bool:
    return importlib.util.find_spec("huggingface_hub") is not None


def _download_one(remote: RemoteFile, dest_dir: Path, opener: Opener | None, log: Log) -> Path:
    final = dest_dir / remote.filename
    expected_sha = remote.sha256 or _read_recorded(dest_dir).get(remote.filename)
    if final.is_file():
        problem = _mismatch(final, remote, expected_sha)
        if problem is None:
            log(f"{final}: already present and verified")
            return final
        log(f"{final}: present but wrong ({problem}); downloading again")
    part = final.with_name(final.name + ".part")
    try:
        if remote.hub is not None and opener is None and _hub_available():
            _fetch_from_hub(remote, part)
        else:
            if remote.hub is not None and opener is None:
                log(f"{remote.filename}: huggingface_hub is not installed, plain HTTP download (an interruption "
                    f"restarts it; pip install 'looped[hub]' to resume)")
            _fetch(remote, part, dest_dir, opener or urllib.request.urlopen)
        problem = _mismatch(part, remote, remote.sha256)
        if problem is not None:
            raise DataError(f"download of {remote.url} is corrupt: {problem} (deleted; try again)")
    except BaseException:
        # Also on Ctrl-C: a half-written .part is useless (there is no resume).
        part.unlink(missing_ok=True)
        raise
    os.replace(part, final)  # atomic: the final name only ever holds a complete, checked file
    if remote.sha256 is None:
        _record_checksum(dest_dir, remote.filename, sha256_of(final), log)
    log(f"{final}: downloaded")
    return final


def download(
    name: str, dest_dir: str | Path, *, opener: Opener | None = None, log: Log = _log_to_stderr
) -> list[Path]:
    """Fetch every official file of dataset `name` (a DATASETS key) into `dest_dir`.

    Hub-hosted files go through huggingface_hub when it is installed and no `opener` is
    given. `opener(url, timeout=...)` must return a context manager with ``read(n)`` (and
    optionally ``headers``), like ``urllib.request.urlopen`` (the default); tests pass fakes.
    Returns the final paths, in DATASETS order.
    """
    remotes = _files_of(name)
    dest = Path(dest_dir).expanduser()
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"{dest}: cannot create the download directory ({err.strerror or err})") from None
    return [_download_one(remote, dest, opener, log) for remote in remotes]


def config_for(name: str, dest_dir: str | Path) -> dict[str, Any]:
    """The contents of the ``data:`` section that trains on the files `download` fetched."""
    _files_of(name)  # unknown names fail the same way as in download()
    dest = Path(dest_dir).expanduser()
    if name == "enwik8":
        return {"corpus": "enwik8", "path": str(dest / "enwik8.zip")}
    if name == "wikitext103":
        return {
            "corpus": "wikitext103",
            "train_paths": [str(dest / "train-00000-of-00002.parquet"), str(dest / "train-00001-of-00002.parquet")],
            "heldout_paths": [str(dest / "validation-00000-of-00001.parquet")],
        }
    if name == "tinystories":
        return {
            "corpus": "tinystories",
            "train_paths": [str(dest / "TinyStoriesV2-GPT4-train.txt")],
            "heldout_paths": [str(dest / "TinyStoriesV2-GPT4-valid.txt")],
            "max_train_bytes": TINYSTORIES_MAX_TRAIN_BYTES,
        }
    raise DataError(f"no training config known for dataset {name!r}")
