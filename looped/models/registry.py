"""Architecture registry: name -> (config dataclass, model class).

Registering is all a new architecture needs: the shared tests, the CLI (`looped params`, `train`, `eval`,
`generate`) and the recipes look architectures up here.

    @register("my_loop", MyLoopConfig, test_overrides={"dim": 32})
    class MyLoop(CausalLM): ...
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
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


def _load_builtin() -> None:
    # Importing the family modules runs their @register decorators.
    from . import loop, reasoning_baselines, recurrent_depth, rlt, transformer  # noqa: F401
