"""Sharing checkpoints: `from_pretrained` (a local folder or `hf:ORG/NAME[@REV]`) and `push` (a checkpoint folder
plus a generated model card, uploaded to the Hub; needs `pip install 'looped[hub]'`).

A pushed repository is a checkpoint folder at its root (config.json, model.safetensors, README.md; the trainer
state only with `with_trainer`), so its Hub snapshot loads exactly like a local checkpoint.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
import yaml

from .. import __version__, hub
from ..config import to_dict
from . import checkpoint as ckpt

TRAINER_FILES = ("trainer.safetensors", "trainer.json")


def resolve(path_or_hf_id: str | Path, which: str | None = None) -> Path:
    """The checkpoint folder of a run folder, checkpoint folder or `hf:ORG/NAME[@REV]`."""
    return ckpt.resolve_checkpoint(str(path_or_hf_id), which)


def from_pretrained(path_or_hf_id: str | Path, which: str | None = None, device: str | torch.device = "cpu"):
    """(model in eval mode, RunConfig) from a checkpoint folder, a run folder (its `which` checkpoint, default the
    run's train.select) or a pushed checkpoint `hf:ORG/NAME[@REV]` (downloaded once into the Hub cache)."""
    return ckpt.load_model(resolve(path_or_hf_id, which), device)


# --- the model card -------------------------------------------------------------------------------------------
def _run_folder(checkpoint: Path) -> Path | None:
    """The run folder a checkpoint folder belongs to (<run>/checkpoints/<which>), if any."""
    run = checkpoint.parent.parent
    return run if checkpoint.parent.name == "checkpoints" and (run / "metrics.jsonl").is_file() else None


def heldout_scores(checkpoint: Path) -> dict:
    """The held-out evaluation logged at the checkpoint's update (metrics.jsonl of its run): val_* numbers."""
    run = _run_folder(checkpoint)
    trainer = checkpoint / "trainer.json"
    if run is None or not trainer.is_file():
        return {}
    step = json.loads(trainer.read_text())["step"]
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [e for e in events if "val_loss" in e and e["step"] <= step]
    if not evals:
        return {}
    last = evals[-1]
    return {"step": last["step"], **{k: v for k, v in last.items() if k.startswith("val_")}}


def _trained_on(config) -> dict:
    if config.task.kind != "lm":
        return {"task": to_dict(config.task)}
    data = config.data
    split = {"kjv": "held-out books (canonical index divisible by 11)", "enwik8": f"{data.heldout_split} 5M bytes",
             "wikitext103": "official validation split", "tinystories": "official validation file"}.get(
        data.corpus, f"last {data.heldout_fraction:g} of the file" if data.path else "separate held-out files")
    return {"corpus": data.corpus, "heldout_split": split}


def card_metadata(checkpoint: Path) -> dict:
    config = ckpt.read_config(checkpoint)
    from ..models import build_model

    with torch.device("meta"):  # counting needs no memory
        parameters = build_model(config.model).parameter_counts()["total"]
    return {"library_name": "looped", "tags": ["looped", config.model.arch],
            "looped": {"arch": config.model.arch, "parameters": parameters, **_trained_on(config),
                       "heldout": heldout_scores(checkpoint), "version": __version__}}


def model_card(checkpoint: Path, repo_id: str) -> str:
    """README.md of a pushed checkpoint: YAML metadata (read by the Hub and by `looped`) and a short text."""
    meta = card_metadata(checkpoint)
    info = meta["looped"]
    scores = info.pop("heldout")
    rows = "\n".join(f"| {k} | {v:.6g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in scores.items())
    trained = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in info.items()
                        if k in ("corpus", "heldout_split", "task"))
    info["heldout"] = scores
    return f"""---
{yaml.safe_dump(meta, sort_keys=False).strip()}
---

# {repo_id}

Architecture `{info['arch']}`, {info['parameters']:,} parameters, trained with
[looped](https://pypi.org/project/looped/) {info['version']} ({trained}).

Held-out evaluation at the pushed checkpoint:

| metric | value |
|---|---|
{rows or '| (none logged) | |'}

Use it (`pip install 'looped[hub]'`):

```bash
looped eval hf:{repo_id}
looped generate hf:{repo_id} --prompt "And God said"
```

```python
import looped
model, config = looped.from_pretrained("hf:{repo_id}")
```

Reproduce it (the whole run configuration is config.json):

```bash
hf download {repo_id} config.json --local-dir . && looped train config.json --out runs/{repo_id.split('/')[-1]}
```
"""


# --- push ------------------------------------------------------------------------------------------------------
def stage(checkpoint: Path, folder: Path, repo_id: str, with_trainer: bool = False) -> list[str]:
    """Fill `folder` with what `push` uploads; returns the file names. Optimizer/RNG state stays behind unless
    `with_trainer` (then `looped train ... --resume` can continue from the pushed checkpoint)."""
    names = list(ckpt.FILES) + ([n for n in TRAINER_FILES if (checkpoint / n).is_file()] if with_trainer else [])
    for name in names:
        shutil.copy2(checkpoint / name, folder / name)
    (folder / "README.md").write_text(model_card(checkpoint, repo_id))
    return sorted(names + ["README.md"])


def push(run: str, repo_id: str, *, which: str | None = None, private: bool = False, revision: str | None = None,
         with_trainer: bool = False, api=None, dry_run: Path | None = None) -> dict:
    """Upload a run's checkpoint (or a checkpoint folder) with its model card to the Hub repository `repo_id`.
    `dry_run`: write what would be uploaded (files and model card) into that new folder instead, for review; no
    network and no token needed."""
    hub.parse_hf_id(repo_id)  # the id well formed ...
    if dry_run is not None:
        return dry_run_push(run, repo_id, Path(dry_run), which=which, with_trainer=with_trainer)
    hub.client()  # ... the extra installed ...
    if api is None:
        hub.require_token()  # ... and a token there, before any network call
    checkpoint = resolve(run, which)
    ckpt.load_model(checkpoint)  # refuse an incomplete or damaged folder before uploading anything
    with tempfile.TemporaryDirectory(prefix="looped-push-") as tmp:
        files = stage(checkpoint, Path(tmp), repo_id, with_trainer)
        url = hub.upload_folder(Path(tmp), repo_id, private=private, revision=revision, api=api)
    return {"checkpoint": str(checkpoint), "repo": repo_id, "revision": revision or "main", "files": files,
            "commit": url}


def dry_run_push(run: str, repo_id: str, folder: Path, *, which: str | None, with_trainer: bool) -> dict:
    """`looped push --dry-run DIR`: the staged files and model card in DIR (a new or empty folder), written as one
    rename of a complete temporary folder."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"--dry-run {folder}: choose a new or empty folder (it would mix two stagings)")
    checkpoint = resolve(run, which)
    ckpt.load_model(checkpoint)  # what a real push would refuse (a damaged or non-finite file), this one refuses
    try:
        parent = ensure_dir(folder.absolute().parent)
        staged = Path(tempfile.mkdtemp(dir=parent, prefix=f".{folder.name}.tmp-"))
    except OSError as err:  # name the folder asked for, not the temporary one beside it
        raise OSError(err.errno, f"--dry-run {folder}: cannot write there ({err.strerror})") from None
    try:
        files = stage(checkpoint, staged, repo_id, with_trainer)
        staged.replace(folder)  # onto a missing or empty folder: one rename
    finally:
        if staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
    return {"checkpoint": str(checkpoint), "repo": repo_id, "files": files, "staged": str(folder),
            "uploaded": False}


def seed_resume(hf_id: str, out: Path) -> Path:
    """For `looped train hf:ORG/NAME --resume --out RUN`: put the pushed checkpoint (it needs its trainer state,
    `looped push --with-trainer`) in RUN/checkpoints/last unless RUN already has one; returns its config.json."""
    folder = resolve(hf_id)
    missing = [name for name in TRAINER_FILES if not (folder / name).is_file()]
    if missing:
        raise ckpt.CheckpointError(f"{hf_id}: pushed without its trainer state ({missing[0]} missing), so it "
                                   f"cannot be resumed (push it with --with-trainer)")
    last = Path(out) / "checkpoints" / "last"
    check_same_run(hf_id, folder, Path(out))
    if not ckpt.is_checkpoint(last):
        names = list(ckpt.FILES) + list(TRAINER_FILES)
        staged = Path(tempfile.mkdtemp(dir=ensure_dir(last.parent), prefix=".last.hub-"))
        for name in names:
            shutil.copyfile(folder / name, staged / name)  # copies, not links into the Hub cache
        staged.replace(last)  # one rename: a half-copied folder is never taken for a checkpoint
    return last / "config.json"


def check_same_run(hf_id: str, pushed: Path, out: Path) -> None:
    """Refuse to continue `hf_id` in a folder that holds another run (it would be continued, and overwritten,
    instead of the pushed checkpoint). Same run = the same run id in trainer.json (written since run ids exist);
    for checkpoints older than that, the same config apart from the keys a resume may change."""
    from .run_folder import existing_run
    from .trainer import RESUMABLE_KEYS, first_difference

    local = ckpt.find_checkpoint(out / "checkpoints" / "last")
    if local is None:
        what = existing_run(out)
        if what:
            raise ckpt.CheckpointError(f"{out} already holds a run ({what}) with no checkpoint; choose another --out "
                                       f"to continue {hf_id}")
        return
    ids = [ckpt.trainer_meta(folder).get("run_id") for folder in (pushed, local)]
    if all(ids):
        differs = None if ids[0] == ids[1] else f"run id {ids[1]} here, {ids[0]} pushed"
    else:
        key = first_difference(to_dict(ckpt.read_config(pushed)), to_dict(ckpt.read_config(local)),
                               ignore=RESUMABLE_KEYS)
        differs = key and f"their configs differ at {key.split(' (')[0]}"
    if differs:
        raise ckpt.CheckpointError(f"{out} holds a different run than {hf_id} ({differs}); choose another --out "
                                   f"(nothing was changed)")


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path

