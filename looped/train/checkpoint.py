"""Self-contained checkpoint folders, written atomically, read without unpickling.

    <folder>/config.json               the whole RunConfig (model + data + optim + train)
    <folder>/model.safetensors         model weights
    <folder>/trainer.safetensors       optimizer moments, RNG streams, sampler permutation (tensors)
    <folder>/trainer.json              step, targets, best validation loss, optimizer hyper-parameters ...
    <folder>/manifest.json             SHA-256 of every other file; written last, so it marks a complete folder

A folder is first written under a temporary name (`.last.tmp-*`) and then renamed into place: `last` moves
to `.last.old`, the temporary folder to `last`, then `.last.old` is removed. A kill at any instant leaves at
least one complete checkpoint among these three names; `find_checkpoint` picks the newest complete one and
`recover_checkpoint` (the trainer, holding the run's lock) renames it back to `last` and removes the rest.
A loader checks model.safetensors against the manifest, so a damaged file is refused in one line instead of
evaluating silently; checkpoints written before manifests existed still load.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load as load_tensor_bytes

from .. import hub
from ..config import ConfigError, from_dict, to_dict
from ..io import atomic_path, atomic_save_figure, atomic_write_text, umask  # noqa: F401  (re-exported)

FILES = ("config.json", "model.safetensors")
MANIFEST = "manifest.json"


class CheckpointError(ValueError):
    """A checkpoint folder is missing, incomplete, corrupt or does not fit the model/config."""


def write_folder_atomically(folder: Path, files: dict[str, Any]) -> None:
    """files: name -> str (text) | dict[str, Tensor] | (dict[str, Tensor], metadata dict) (safetensors).
    Replaces `folder` as a whole; the folder also gets manifest.json (SHA-256 of each file), written last.
    The caller must be the folder's only writer (the trainer holds the run's lock)."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    for stale in _temporary_folders(folder):  # left by a kill mid-write; recover_checkpoint kept any newer one
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.tmp-"))
    tmp.chmod(0o777 & ~umask())
    try:
        digests = {name: _write_file(tmp / name, content) for name, content in files.items()}
        _write_file(tmp / MANIFEST, json.dumps({"sha256": digests}, indent=1))
        _fsync(tmp)
        old = _old_folder(folder)
        if folder.exists():
            if old.exists():
                shutil.rmtree(old)
            os.replace(folder, old)
        os.replace(tmp, folder)
        _fsync(folder.parent)
        if old.exists():
            shutil.rmtree(old)
    except OSError as err:
        raise OSError(err.errno, f"cannot write checkpoint {folder}: {err.strerror or err}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_file(path: Path, content: Any) -> str:
    """Write one file of a checkpoint (plain permissions, flushed to disk); its SHA-256."""
    if isinstance(content, str):
        data = content.encode()
    else:
        from safetensors.torch import save as tensors_to_bytes

        tensors, metadata = content if isinstance(content, tuple) else (content, None)
        data = tensors_to_bytes({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, metadata=metadata)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(path, 0o666 & ~umask())  # every file alike, whoever wrote it
    return hashlib.sha256(data).hexdigest()


def _fsync(folder: Path) -> None:
    """Make renames inside `folder` durable (a directory fsync; not available on every platform)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _old_folder(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.old")


def _temporary_folders(folder: Path) -> list[Path]:
    return sorted(folder.parent.glob(f".{folder.name}.tmp-*"))


# --- finding the newest complete checkpoint -------------------------------------------------------------

def is_checkpoint(folder: Path) -> bool:
    return all((Path(folder) / f).is_file() for f in FILES)


def read_manifest(folder: Path) -> dict[str, str] | None:
    """name -> SHA-256 from manifest.json; None for a folder without one (written before manifests)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text())["sha256"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: corrupt manifest ({err})") from None


def is_complete(folder: Path, *, need_manifest: bool = False) -> bool:
    """Every file a loader needs is there (a temporary folder also needs its manifest, written last)."""
    folder = Path(folder)
    if not is_checkpoint(folder):
        return False
    try:
        manifest = read_manifest(folder)
    except CheckpointError:
        return False
    if manifest is None:
        return not need_manifest
    return all((folder / name).is_file() for name in manifest)


def checkpoint_step(folder: Path) -> int:
    """The update a checkpoint was written at (-1 when it does not say)."""
    try:
        return int(json.loads((Path(folder) / "trainer.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1


def find_checkpoint(folder: Path) -> Path | None:
    """The newest complete checkpoint among `folder` (e.g. checkpoints/last), its `.last.old` and its
    complete `.last.tmp-*` folders, as a kill between the renames of write_folder_atomically leaves them;
    None when there is none. Ties go to `folder` itself, then to the temporary folder (newer than `.old`)."""
    folder = Path(folder)
    candidates = [(folder, 2)] if is_complete(folder) else []
    candidates += [(tmp, 1) for tmp in _temporary_folders(folder) if is_complete(tmp, need_manifest=True)]
    old = _old_folder(folder)
    if is_complete(old):
        candidates.append((old, 0))
    if not candidates:
        return None
    return max(candidates, key=lambda c: (checkpoint_step(c[0]), c[1]))[0]


def recover_checkpoint(folder: Path) -> Path | None:
    """Writer side of find_checkpoint: put the newest complete checkpoint back at `folder` and remove the
    leftovers of an interrupted write. Only the run's lock holder may call this. Returns `folder`, or None."""
    folder = Path(folder)
    newest = find_checkpoint(folder)
    if newest is not None and newest != folder:
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(newest, folder)
    for leftover in [*_temporary_folders(folder), _old_folder(folder)]:
        if leftover.exists():
            shutil.rmtree(leftover, ignore_errors=True)
    return folder if newest is not None else None


def run_checkpoint(run: Path, which: str = "last") -> Path:
    """The newest complete checkpoints/<which> of a run folder; CheckpointError naming the run otherwise."""
    found = find_checkpoint(Path(run) / "checkpoints" / which)
    if found is None:
        raise CheckpointError(f"{run}: no complete checkpoint in checkpoints/{which}")
    return found


def trainer_meta(folder: Path) -> dict:
    """trainer.json of a checkpoint folder (step, total_steps, best_step ...)."""
    path = Path(folder) / "trainer.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: unreadable ({err})") from None


def run_finished(run: Path) -> bool:
    """The run has a checkpoint at its full budget, evaluated (a kill during the final evaluation is not)."""
    last = find_checkpoint(Path(run) / "checkpoints" / "last")
    if last is None:
        return False
    meta = trainer_meta(last)
    return meta["step"] >= meta["total_steps"] and meta.get("evaluated_step", meta["step"]) == meta["step"]


def resolve_checkpoint(path: str | Path, which: str | None = None, note=None) -> Path:
    """A checkpoint folder, the newest complete checkpoints/<which> of a run folder (default: the run's
    train.select; `best` before any evaluation falls back to `last` with a note) or a pushed checkpoint
    `hf:ORG/NAME[@REV]` (its local snapshot in the Hub cache, `pip install 'looped[hub]'`). CheckpointError
    otherwise."""
    folder = hub.snapshot(str(path)) if hub.is_hf_id(str(path)) else Path(path)
    note = note or (lambda message: print(f"looped: note: {message}", file=sys.stderr))
    if is_checkpoint(folder):
        return folder
    if (folder / "checkpoints").is_dir():
        last = find_checkpoint(folder / "checkpoints" / "last")
        wanted = which or (read_config(last).train.select if last is not None else "last")
        found = find_checkpoint(folder / "checkpoints" / wanted)
        if found is None and which is None and wanted == "best" and last is not None:
            note(f"{folder}: no best checkpoint yet (no evaluation so far); using {last}")
            return last
        if found is None:
            raise CheckpointError(f"{folder}: no complete checkpoint in checkpoints/{wanted} yet")
        return found
    if not folder.exists():
        raise CheckpointError(f"{folder}: no such run or checkpoint folder")
    raise CheckpointError(f"{folder}: not a checkpoint folder (no config.json/model.safetensors, no checkpoints/)")


def read_config(folder: Path):
    """RunConfig stored in a checkpoint folder."""
    from .config import RunConfig

    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: no such checkpoint folder")
    if not is_checkpoint(folder):
        missing = [f for f in FILES if not (folder / f).is_file()]
        raise CheckpointError(f"{folder}: not a checkpoint folder (missing {', '.join(missing)})")
    try:
        data = json.loads((folder / "config.json").read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{folder / 'config.json'}: corrupt JSON ({err.msg} at line {err.lineno})") from None
    try:
        return from_dict(RunConfig, data)
    except ConfigError as err:
        raise CheckpointError(f"{folder / 'config.json'}: {err}") from None


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file, checked against its folder's manifest when there is one."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: missing")
    data = path.read_bytes()
    expected = (read_manifest(path.parent) or {}).get(path.name)
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise CheckpointError(f"{path}: damaged file (its SHA-256 differs from the one recorded in "
                              f"{MANIFEST} when it was written)")
    try:
        # sorted: safetensors gives the tensors of a byte buffer in an order that varies between processes,
        # and FSDP ranks must walk the optimizer state in one order (its loading is a collective)
        return dict(sorted(load_tensor_bytes(data).items()))
    except (SafetensorError, ValueError) as err:
        raise CheckpointError(f"{path}: corrupt safetensors file ({str(err).splitlines()[0]})") from None


def model_file(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """model.safetensors content: the weights plus the architecture name as metadata."""
    return model.state_dict(), {"arch": getattr(model, "arch_name", type(model).__name__)}


def load_weights(model: torch.nn.Module, folder: Path) -> None:
    """Load model.safetensors strictly: another architecture, a missing/unexpected key or a shape mismatch
    is refused with a one-line error (two rows can share every key, e.g. workspace and its retention
    variant, so the architecture name is checked first)."""
    path = Path(folder) / "model.safetensors"
    weights = read_tensors(path)
    try:
        with safe_open(str(path), "pt") as f:
            saved_arch = (f.metadata() or {}).get("arch")
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path}: corrupt safetensors file ({err})") from None
    arch = getattr(model, "arch_name", None)
    if saved_arch is not None and arch is not None and saved_arch != arch:
        raise CheckpointError(f"{folder}: a {saved_arch!r} checkpoint cannot be loaded as {arch!r}")
    own = model.state_dict()
    weights = {k: _legacy_shape(v, own[k]) if k in own else v for k, v in weights.items()}
    missing = sorted(set(own) - set(weights))
    unexpected = sorted(set(weights) - set(own))
    if missing or unexpected:
        what = f"missing key {missing[0]}" if missing else f"unexpected key {unexpected[0]}"
        raise CheckpointError(f"{folder}: weights do not fit {type(model).__name__} ({what})")
    for key, value in weights.items():
        if value.shape != own[key].shape:
            raise CheckpointError(f"{folder}: {key} has shape {tuple(value.shape)}, model expects "
                                  f"{tuple(own[key].shape)}")
    check_finite(path, weights, {name for name, _ in model.named_parameters()})
    model.load_state_dict(weights)


def check_finite(path: Path, weights: dict[str, torch.Tensor], names: set[str]) -> None:
    """Refuse NaN / inf in the parameters `names`, whatever the file's age: the trainer never saves such weights,
    but a checkpoint from before manifests (or one edited or flipped on disk) has no checksum to catch it, and
    would evaluate silently to NaN. Buffers are not checked (a mask may hold -inf on purpose)."""
    for name in sorted(names & set(weights)):
        value = weights[name]
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"{path}: tensor {name} holds non-finite values (NaN or inf); these weights "
                                  f"cannot be used")


def _legacy_shape(saved: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Scalars that became 1-element vectors (the workspace gain gamma was 0-d before FSDP support, which cannot
    shard 0-d parameters) load from older checkpoints; any other shape difference is left for the caller."""
    return saved.reshape(expected.shape) if saved.dim() == 0 and expected.shape == (1,) else saved


def load_model(folder: Path, device: str | torch.device = "cpu"):
    """(model in eval mode, RunConfig) from a checkpoint folder. A reader can race a trainer that checkpoints
    while it loads (write_folder_atomically swaps the whole folder: the model file read from the old folder and
    the manifest from the new one disagree, a false "damaged file"): when the folder was replaced during the
    load, it is loaded once more, from the newest complete checkpoint; a folder that did not change while
    failing is really damaged."""
    from ..models import build_model

    folder = Path(folder)
    for attempt in range(2):
        before = _identity(folder)
        try:
            config = read_config(folder)
            model = build_model(config.model)
            load_weights(model, folder)
            return model.to(device).eval(), config
        except CheckpointError:
            if attempt or (before is not None and _identity(folder) == before):
                raise
            folder = find_checkpoint(folder) or folder


def _identity(folder: Path) -> tuple | None:
    """What changes when a checkpoint folder is replaced by a rename (its inode and its manifest's); None while
    it is missing (between the two renames of a replacement)."""
    try:
        return os.stat(folder).st_ino, os.stat(Path(folder) / MANIFEST).st_ino
    except OSError:
        return None


# --- trainer state: optimizer + RNG streams as tensors, scalars as JSON ----------------------------------

def optimizer_tensors(optimizer: torch.optim.Optimizer,
                      state: dict | None = None) -> tuple[dict[str, torch.Tensor], dict]:
    """state: optimizer.state_dict() by default (FSDP passes the gathered full state)."""
    state = state or optimizer.state_dict()
    tensors = {f"optim.{idx}.{key}": value for idx, entry in state["state"].items()
               for key, value in entry.items()}
    groups = [{k: v for k, v in g.items()} for g in state["param_groups"]]
    return tensors, {"param_groups": groups}


def optimizer_state(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    """The optimizer.state_dict() stored by optimizer_tensors (moments of older 0-d parameters reshaped)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith("optim."):
            _, idx, key = name.split(".", 2)
            param = params[int(idx)]
            state.setdefault(int(idx), {})[key] = value if key == "step" else _legacy_shape(value, param)
    return {"state": state, "param_groups": meta["param_groups"]}


def restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    optimizer.load_state_dict(optimizer_state(optimizer, tensors, meta))


def rng_tensors() -> tuple[dict[str, torch.Tensor], dict]:
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    tensors["rng.numpy"] = torch.from_numpy(keys.astype(np.int64))
    py_version, py_state, py_gauss = random.getstate()
    meta = {"numpy": [kind, int(pos), int(has_gauss), float(gauss)], "python": [py_version, list(py_state), py_gauss]}
    return tensors, meta


def restore_rng(tensors: dict[str, torch.Tensor], meta: dict) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    kind, pos, has_gauss, gauss = meta["numpy"]
    np.random.set_state((kind, tensors["rng.numpy"].numpy().astype(np.uint32), pos, has_gauss, gauss))
    py_version, py_state, py_gauss = meta["python"]
    random.setstate((py_version, tuple(py_state), py_gauss))


def config_json(config) -> str:
    return json.dumps(to_dict(config), indent=2)
