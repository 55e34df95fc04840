"""Typed configuration: dataclasses loaded from YAML / dicts with strict checking, and --set overrides.

Every error names the dotted key (`train.lr: expected float, got 'fast'`), so a typo in a YAML file
stops a run before it starts instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
import json
import re
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
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = load_yaml_text(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def dumps(obj: Any) -> str:
    return json.dumps(to_dict(obj), indent=2, sort_keys=False)
