"""Self-contained checkpoint folders, written atomically, read without unpickling.

    <folder>/config.json               the whole RunConfig (model + data + optim + train)
    <folder>/model.safetensors         model weights
    <folder>/trainer.safetensors       optimizer moments, RNG streams, sampler permutation (tensors)
    <folder>/trainer.json              step, targets, best validation loss, optimizer hyper-parameters ...

A folder is first written under a temporary name and then renamed into place, so a crash mid-write
leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from .. import hub
from ..config import ConfigError, from_dict, to_dict
from ..io import atomic_path, atomic_save_figure, atomic_write_text  # noqa: F401  (re-exported: older imports)

FILES = ("config.json", "model.safetensors")


class CheckpointError(ValueError):
    """A checkpoint folder is missing, incomplete, corrupt or does not fit the model/config."""


def write_folder_atomically(folder: Path, files: dict[str, Any]) -> None:
    """files: name -> str (text) | dict[str, Tensor] | (dict[str, Tensor], metadata dict) (safetensors).
    Replaces `folder` as a whole."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.tmp-"))
    tmp.chmod(0o755)
    try:
        for name, content in files.items():
            if isinstance(content, str):
                (tmp / name).write_text(content)
            else:
                tensors, metadata = content if isinstance(content, tuple) else (content, None)
                save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp / name),
                          metadata=metadata)
        old = folder.with_name(f".{folder.name}.old")
        if folder.exists():
            if old.exists():
                shutil.rmtree(old)
            os.replace(folder, old)
        os.replace(tmp, folder)
        if old.exists():
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def is_checkpoint(folder: Path) -> bool:
    return all((Path(folder) / f).is_file() for f in FILES)


def resolve_checkpoint(path: str, which: str | None = None) -> Path:
    """A checkpoint folder, a run folder (checkpoints/<which>, default: the run's train.select) or a pushed
    checkpoint `hf:ORG/NAME[@REV]` (its local snapshot in the Hub cache, `pip install 'looped[hub]'`)."""
    folder = hub.snapshot(path) if hub.is_hf_id(path) else Path(path)
    if is_checkpoint(folder):
        return folder
    if (folder / "checkpoints").is_dir():
        if which is None:
            last = folder / "checkpoints" / "last"
            which = read_config(last).train.select if is_checkpoint(last) else "last"
        return folder / "checkpoints" / which
    if not folder.exists():
        raise ValueError(f"{folder}: no such run or checkpoint folder")
    raise ValueError(f"{folder}: not a checkpoint folder (no config.json/model.safetensors, no checkpoints/)")


def run_finished(folder: Path) -> bool:
    """True when the run in `folder` has a last checkpoint at its full budget."""
    last = Path(folder) / "checkpoints" / "last"
    if not is_checkpoint(last):
        return False
    meta = json.loads((last / "trainer.json").read_text())
    return meta["step"] >= meta["total_steps"]


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
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: missing")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
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
    model.load_state_dict(weights)


def _legacy_shape(saved: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Scalars that became 1-element vectors (the workspace gain gamma was 0-d before FSDP support, which cannot
    shard 0-d parameters) load from older checkpoints; any other shape difference is left for the caller."""
    return saved.reshape(expected.shape) if saved.dim() == 0 and expected.shape == (1,) else saved


def load_model(folder: Path, device: str | torch.device = "cpu"):
    """(model in eval mode, RunConfig) from a checkpoint folder."""
    from ..models import build_model

    config = read_config(folder)
    model = build_model(config.model)
    load_weights(model, folder)
    return model.to(device).eval(), config


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
