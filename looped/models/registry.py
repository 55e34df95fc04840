"""Architecture registry: name -> (config dataclass, model class).

Registering is all a plugin architecture needs: the shared tests, the CLI (`looped params`, `train`, `eval`,
`generate`) and the recipes look architectures up here. A built-in one also names its module in BUILTIN_MODULES
(the registry imports its members by name, so no module of this package imports it back) and, for family "lm",
states its parameter count per component in tests/parameter_formulas.py.

    @register("my_loop", MyLoopConfig, test_overrides={"dim": 32})
    class MyLoop(CausalLM): ...

Architectures outside this package are plugins, imported the first time the registry is read:
  LOOPED_PLUGINS=my_models.py,other_pkg.models looped train cfg.yaml     # .py files or module names
  [project.entry-points."looped.architectures"] my_loop = "my_pkg.models" # an installed package
(examples/input_injection.py is a worked example.)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import sys
import zlib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ..config import ConfigError, from_dict


@dataclass(frozen=True)
class Arch:
    name: str
    config_cls: type
    model_cls: type
    family: str = "lm"  # "lm": CausalLM protocol (shared LM drivers apply)
    test_overrides: dict[str, Any] = field(default_factory=dict)  # a tiny, fast config for shared tests
    test_depths: tuple[int, ...] = ()  # depths (rounds) the shared drivers sweep, () = fixed depth

    def config(self, **overrides) -> Any:
        return from_dict(self.config_cls, {"arch": self.name, **overrides}, "model")

    def tiny_config(self, **overrides) -> Any:
        return self.config(**{**self.test_overrides, **overrides})


_ARCHS: dict[str, Arch] = {}


def register(name: str, config_cls: type, *, family: str = "lm", test_overrides: dict | None = None,
             test_depths: tuple[int, ...] = ()):
    """Class decorator adding a model class to the registry under `name`."""

    def wrap(model_cls: type) -> type:
        if name in _ARCHS:
            raise ValueError(f"architecture {name!r} is already registered")
        if not dataclasses.is_dataclass(config_cls) or "arch" not in {f.name for f in dataclasses.fields(config_cls)}:
            raise TypeError(f"{config_cls.__name__} must be a dataclass with an `arch` field")
        _ARCHS[name] = Arch(name, config_cls, model_cls, family, dict(test_overrides or {}), tuple(test_depths))
        model_cls.arch_name = name
        return model_cls

    return wrap


def get_arch(name: str) -> Arch:
    _load_builtin()
    if name not in _ARCHS:
        raise ConfigError(f"model.arch: unknown architecture {name!r} (known: {', '.join(sorted(_ARCHS))})")
    return _ARCHS[name]


def arch_names(family: str | None = None) -> list[str]:
    _load_builtin()
    return sorted(n for n, a in _ARCHS.items() if family is None or a.family == family)


def model_config_from_dict(data: Any, prefix: str = "model") -> Any:
    """Pick the config class from data['arch'] and build it strictly."""
    if not isinstance(data, dict) or "arch" not in data:
        raise ConfigError(f"{prefix}.arch: missing (known: {', '.join(arch_names())})")
    return from_dict(get_arch(data["arch"]).config_cls, data, prefix)


def build_model(config: Any):
    """Instantiate the model class registered for config.arch."""
    return get_arch(config.arch).model_cls(config)


# The built-in architectures are loaded by module name, as plugins are: importing a module runs its @register
# decorators, and no module of this package imports the registry that imports it (one-way imports).
BUILTIN_MODULES = ("exit_gate", "loop", "lstm", "mor", "prelude_coda", "reasoning_baselines", "recurrent_depth",
                   "rlt", "stable_loop", "transformer", "trm")


def _load_builtin() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.{module}")
    load_plugins()


PLUGIN_ENV = "LOOPED_PLUGINS"
ENTRY_POINT_GROUP = "looped.architectures"
_plugins_loaded: set[str] = set()


def load_plugins() -> None:
    """Import every plugin not imported yet: the entries of $LOOPED_PLUGINS (comma-separated; a path ending
    in .py or a module name) and the modules installed packages declare under the entry-point group
    'looped.architectures'. Importing a plugin runs its @register decorators."""
    sources = [("env", item.strip()) for item in os.environ.get(PLUGIN_ENV, "").split(",") if item.strip()]
    sources += [("entry point", value) for value in _entry_point_plugins()]
    for origin, item in sources:
        if item in _plugins_loaded:
            continue
        _plugins_loaded.add(item)  # before importing: a plugin that reads the registry must not recurse
        try:
            _import_plugin(item)
        except Exception as err:
            _plugins_loaded.discard(item)
            where = PLUGIN_ENV if origin == "env" else f"entry point group {ENTRY_POINT_GROUP}"
            raise ConfigError(f"{where}: cannot import plugin {item!r}: {type(err).__name__}: {err}") from None


@functools.cache
def _entry_point_plugins() -> tuple[str, ...]:
    """Scanned once per process: reading every installed package's metadata takes milliseconds."""
    return tuple(ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP))


def _import_plugin(item: str) -> None:
    if not item.endswith(".py"):
        importlib.import_module(item.split(":")[0])
        return
    path = Path(item).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such file {str(path)!r}")
    name = f"looped_plugin_{path.stem}_{zlib.crc32(str(path).encode()):08x}"  # one module per file
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
