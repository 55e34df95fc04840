"""Typed configuration: dataclasses loaded from YAML / dicts with strict checking, and --set overrides.

Every error names the dotted key (`train.lr: expected float, got 'fast'`), so a typo in a YAML file
stops a run before it starts instead of being silently ignored.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import json
import re
import textwrap
import tokenize
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `3e-4` (no dot) as a string; researchers write learning rates that way."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def load_yaml_text(text: str):
    return yaml.load(text, Loader=_Loader)


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message names the key."""


class MissingExtra(RuntimeError):
    """An optional integration is used without its extra installed; the message names the pip command."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check (and minimally convert) one value against a type annotation."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{key}: {value!r} matches none of {_type_name(tp)}")
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{key}: {value!r} is not one of {list(get_args(tp))}")
        return value
    if origin in (list, tuple):
        if isinstance(value, (str, int, float, bool)):  # `--set data.heldout_paths=x.txt`: a list of one
            value = [value]
        if value is None:  # `--set data.heldout_paths=` (null): no items
            value = []
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (item_tp, *_) = get_args(tp) or (Any,)
        return [_convert(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported field type {_type_name(tp)}")


def from_dict(cls: type, data: Any, prefix: str = "") -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and wrong types by dotted name."""
    where = prefix or cls.__name__
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {data!r}")
    upgrade = getattr(cls, "read_old_spelling", None)  # a renamed key or value that saved configs still hold
    if upgrade is not None:
        data = upgrade(data, where)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        name = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise ConfigError(f"{name}: unknown key (known: {', '.join(sorted(fields))})")
    resolver = getattr(cls, "__resolve_field__", None)
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        tp = resolver(name, data) if resolver else None
        kwargs[name] = from_dict(tp, value, key) if tp is not None else _convert(value, hints[name], key)
    try:
        obj = cls(**kwargs)
    except TypeError as err:  # a required field is missing
        raise ConfigError(f"{where}: {err}") from None
    validate = getattr(obj, "validate", None)
    if validate is not None:
        try:
            validate()
        except ConfigError:
            raise
        except ValueError as err:
            raise ConfigError(str(err)) from None
    return obj


def to_dict(obj: Any) -> Any:
    """Plain JSON/YAML-ready structure of a (nested) dataclass."""
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def parse_overrides(pairs: list[str]) -> dict:
    """["train.lr=3e-4", "model.dim=64"] -> nested dict; values parsed as YAML scalars.

    An empty value (`data.path=`) means null, i.e. "unset this key", as a YAML `key:` line does."""
    tree: dict = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"override {pair!r}: expected key.sub=value")
        dotted, raw = pair.split("=", 1)
        value = load_yaml_text(raw) if raw.strip() else None
        node = tree
        *parents, leaf = dotted.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {pair!r}: {part} is not a section")
        node[leaf] = value
    return tree


def merge(base: dict, extra: dict) -> dict:
    """Recursive dict merge; `extra` wins."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if path.is_dir():
        beside = " (a run folder's config is RUN/config.yaml)" if (path / "config.yaml").is_file() else ""
        raise ConfigError(f"{path}: a folder, not a config file{beside}")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = load_yaml_text(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if data is None:  # an empty or comment-only file would silently train every default (KJV, 924k parameters)
        raise ConfigError(f"{path}: empty config (no keys)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def dumps(obj: Any) -> str:
    return json.dumps(to_dict(obj), indent=2, sort_keys=False)


# --- what each key means ---------------------------------------------------------------------------------------
# A field's meaning is the comment written beside it (or in the lines right above it) in its dataclass: the place a
# contributor already edits when adding a key, so `looped config show` cannot drift from the code. The standard
# architecture hyperparameters that every model config repeats are explained once, here.
COMMON_MEANINGS = {
    "arch": "the registered architecture; the other model keys depend on it (`looped config show ARCH`)",
    "kind": "what is trained: lm (next byte of text from the data section), sequence (algorithmic tasks) or "
            "reasoning (seed 002's tasks)",
    "input_kind": "the input layout the model reads: graph (node slots) or tokens (a token string)",
    "vocab_size": "input / output symbols (257 for text: the 256 bytes and a separator)",
    "context_length": "the longest input the model accepts, in symbols",
    "dim": "width of the residual stream (the model dimension)",
    "heads": "attention heads per layer (dim must be divisible by them)",
    "layers": "blocks with their own weights",
    "ffn_dim": "hidden width of each block's feed-forward network",
    "norm_eps": "epsilon of the normalisation layers",
    "dropout": "dropout probability while training",
    "tie_embeddings": "the output head reuses the input embedding matrix",
    "rope_base": "base of the rotary position embedding's frequencies",
    "layer_scale": "LayerScale initial value on the residual branches; null: no LayerScale",
}


def meaning_of(cls: type, name: str) -> str | None:
    """One line saying what field `name` of config dataclass `cls` does (None if nobody wrote it down)."""
    return field_meanings(cls).get(name) or COMMON_MEANINGS.get(name)


def field_meanings(cls: type) -> dict[str, str]:
    """{field name: meaning} of dataclass `cls`; a field without a comment of its own takes the comment of the
    nearest base class that has one. Fields with no comment anywhere are left out."""
    meanings: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        meanings.update(_own_field_comments(klass))
    return {f.name: meanings[f.name] for f in dataclasses.fields(cls) if f.name in meanings}


@functools.lru_cache(maxsize=None)
def _own_field_comments(cls: type) -> dict[str, str]:
    """The comments of the fields `cls` itself declares: trailing ones on the field's lines, else the block of
    comment lines directly above it."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # defined in an interactive session: no source
        return {}
    comments = {token.start[0]: token.string.lstrip("#").strip()
                for token in tokenize.generate_tokens(io.StringIO(source).readline) if token.type == tokenize.COMMENT}
    lines = source.splitlines()
    found = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        trailing = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
        above, n = [], node.lineno - 1
        while n in comments and lines[n - 1].lstrip().startswith("#"):
            above.insert(0, comments[n])
            n -= 1
        text = " ".join(trailing or above).strip()
        if text:
            found[node.target.id] = text
    return found
