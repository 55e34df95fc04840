"""Hugging Face Hub access for the optional `looped[hub]` extra (a leaf: it imports nothing else of looped).

`hf:ORG/NAME[@REVISION]` names a model repository on the Hub; `snapshot` turns it into a local folder of its files
(downloaded once into the shared Hub cache, resumed if interrupted) and `download_file` fetches one file of a
repository at a pinned revision. Both honour HF_HUB_OFFLINE (cache only) and HF_ENDPOINT (a mirror), read when the
call is made, and fail with one line naming the repository.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HF_PREFIX = "hf:"
_TRUE = {"1", "on", "yes", "true"}


class HubError(RuntimeError):
    """The Hub (or its cache) cannot give what was asked for; the message says what and why."""


def is_hf_id(text) -> bool:
    return isinstance(text, str) and text.startswith(HF_PREFIX)


def parse_hf_id(text: str) -> tuple[str, str | None]:
    """'hf:ORG/NAME@REV' -> ('ORG/NAME', 'REV'); the revision is None when not given (the repository's main)."""
    body = text[len(HF_PREFIX):] if is_hf_id(text) else text
    repo_id, _, revision = body.partition("@")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts) or (revision == "" and "@" in body):
        raise HubError(f"{text}: not a Hub id (expected hf:ORG/NAME or hf:ORG/NAME@REVISION)")
    return repo_id, revision or None


def client():
    """The huggingface_hub module, or a one-line error saying how to install it."""
    try:
        import huggingface_hub
        import huggingface_hub.constants
        import huggingface_hub.errors  # noqa: F401  (the package does not import these eagerly)
    except ImportError:
        raise HubError("this needs the huggingface_hub package: pip install 'looped[hub]'") from None
    return huggingface_hub


def offline() -> bool:
    """HF_HUB_OFFLINE as set now (huggingface_hub reads it once, at import)."""
    return client().constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE


# The HTTP clients huggingface_hub has used (requests, httpx, httpx2): their errors, when raised through a Hub call,
# mean "the Hub cannot be reached or answered badly" (no network, DNS, TLS, timeouts), never a bug of ours.
_TRANSPORT_ERRORS = (("requests", "RequestException"), ("httpx", "HTTPError"), ("httpx2", "HTTPError"))


def failure_types() -> tuple[type, ...]:
    """Every exception class that means a Hub call failed for a reason outside looped: the classes of
    huggingface_hub.errors, the errors of whichever HTTP client it imported, OSError (connection errors, the
    cache) and ValueError (what huggingface_hub raises for bad ids and missing tokens)."""
    hub = client()
    found = [OSError, ValueError]
    found += [obj for obj in vars(hub.errors).values() if isinstance(obj, type) and issubclass(obj, Exception)]
    for module_name, class_name in _TRANSPORT_ERRORS:
        module = sys.modules.get(module_name)  # an error of a client that is not imported cannot have been raised
        error = getattr(module, class_name, None) if module is not None else None
        if isinstance(error, type):
            found.append(error)
    return tuple(found)


def require_token() -> None:
    """Before any call that writes to the Hub: a one-line error unless a token is available (HF_TOKEN or the
    one `hf auth login` stored), instead of a network round trip that ends in a 401."""
    if not client().get_token():
        raise HubError("not logged in: run `hf auth login` or set HF_TOKEN (a token with write access)")


def _explain(what: str, err: Exception) -> HubError:
    hub = client()
    if isinstance(err, hub.errors.LocalEntryNotFoundError):
        why = "not in the local Hub cache and HF_HUB_OFFLINE is set" if offline() else \
            "not in the local Hub cache and the Hub cannot be reached"
    elif isinstance(err, hub.errors.RevisionNotFoundError):
        why = "no such revision"
    elif isinstance(err, (hub.errors.RepositoryNotFoundError, hub.errors.GatedRepoError)):
        why = "no such repository (or it is private: log in with `hf auth login`)"
    elif isinstance(err, hub.errors.EntryNotFoundError):
        why = "no such file in the repository"
    elif not isinstance(err, (hub.errors.HfHubHTTPError, ValueError)) and not offline():
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        why = f"the Hub cannot be reached ({detail}); check the network, or HF_ENDPOINT for a mirror"
    else:
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return HubError(f"{what}: {why}")


def snapshot(hf_id: str, allow_patterns: list[str] | None = None) -> Path:
    """Local folder holding the files of `hf:ORG/NAME[@REV]` (the Hub cache's snapshot of that revision)."""
    hub = client()
    repo_id, revision = parse_hf_id(hf_id)
    try:
        return Path(hub.snapshot_download(repo_id, revision=revision, allow_patterns=allow_patterns,
                                          local_files_only=offline(), library_name="looped"))
    except failure_types() as err:
        raise _explain(hf_id, err) from None


def download_file(repo_id: str, filename: str, revision: str, repo_type: str = "model") -> Path:
    """One file of a repository at a pinned revision, through the Hub cache: an interrupted download resumes from
    its partial blob, a second call is a cache hit, and HF_HUB_OFFLINE serves it from the cache only."""
    hub = client()
    try:
        return Path(hub.hf_hub_download(repo_id, filename, revision=revision, repo_type=repo_type,
                                        local_files_only=offline(), library_name="looped"))
    except failure_types() as err:
        raise _explain(f"{repo_id}@{revision}/{filename}", err) from None


def upload_folder(folder: Path, repo_id: str, *, private: bool = False, revision: str | None = None,
                  api=None) -> str:
    """Create the model repository if needed and upload every file of `folder` in one commit; returns the commit
    URL. `api` defaults to huggingface_hub.HfApi() (the token comes from `hf auth login` or HF_TOKEN)."""
    hub = client()
    if api is None:
        require_token()
        api = hub.HfApi()
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), revision=revision,
                                 commit_message="Upload looped checkpoint")
    except failure_types() as err:
        raise _explain(f"hf:{repo_id}", err) from None
    return str(getattr(info, "commit_url", info))
