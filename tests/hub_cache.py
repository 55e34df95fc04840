"""A stand-in for the Hub in offline tests: files laid out exactly as huggingface_hub's cache stores a repository
(<cache>/<type>s--ORG--NAME/{blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/<sha256>, refs/<rev>}),
and a fake HfApi whose upload_folder commits into that layout."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def offline_cache(tmp_path: Path, monkeypatch) -> Path:
    """Point huggingface_hub at an empty cache under tmp_path with HF_HUB_OFFLINE set; returns the cache folder."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def add_commit(cache: Path, repo_id: str, files: dict[str, bytes], revision: str = "main",
               repo_type: str = "model") -> str:
    """Store `files` as one commit of `repo_id` in the cache, point refs/<revision> at it; returns the commit."""
    repo = Path(cache) / f"{repo_type}s--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(repr(sorted((k, hashlib.sha256(v).hexdigest()) for k, v in files.items())).encode()
                          + revision.encode()).hexdigest()
    for name, content in files.items():
        blob = repo / "blobs" / hashlib.sha256(content).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        link = repo / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return commit


class FakeHubApi:
    """Records what `looped push` asks of the Hub and commits uploads into a local cache layout."""

    def __init__(self, cache: Path):
        self.cache, self.calls = Path(cache), []

    def create_repo(self, repo_id, private=None, exist_ok=False, **_):
        self.calls.append(("create_repo", repo_id, private))

    def create_branch(self, repo_id, branch, exist_ok=False, **_):
        self.calls.append(("create_branch", repo_id, branch))

    def upload_folder(self, repo_id, folder_path, revision=None, **_):
        files = {p.name: p.read_bytes() for p in Path(folder_path).iterdir() if p.is_file()}
        commit = add_commit(self.cache, repo_id, files, revision or "main")
        self.calls.append(("upload_folder", repo_id, sorted(files)))
        return f"https://huggingface.co/{repo_id}/commit/{commit}"
