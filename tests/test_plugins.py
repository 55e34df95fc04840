"""Architectures from outside the package: $LOOPED_PLUGINS files and modules, and entry points. The worked
examples (examples/input_injection.py, an LM; examples/looped_encoder.py, a reasoning model) plug into their
family's shared drivers, `looped params` and (the LM) `looped train`, with no test list edited."""

from pathlib import Path

import pytest

import lm_drivers
import reasoning_drivers
from helpers import tiny_run_config, write_config, write_text_corpus
from looped.cli import main
from looped.config import ConfigError
from looped.models import arch_names, get_arch, registry

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "input_injection.py"
REASONING_EXAMPLE = EXAMPLE.with_name("looped_encoder.py")


@pytest.fixture
def example(monkeypatch):
    monkeypatch.setenv("LOOPED_PLUGINS", str(EXAMPLE))
    return "injected_loop"


@pytest.mark.parametrize("check", lm_drivers.ALL_CHECKS, ids=lambda c: c.__name__)
def test_the_example_passes_every_shared_driver(example, check):
    assert example in arch_names("lm")
    check(example)


@pytest.mark.parametrize("check", reasoning_drivers.ALL_CHECKS, ids=lambda c: c.__name__)
def test_the_reasoning_example_passes_every_shared_driver(monkeypatch, check):
    monkeypatch.setenv("LOOPED_PLUGINS", str(REASONING_EXAMPLE))
    assert "looped_encoder" in arch_names("reasoning")
    for arch, kind in reasoning_drivers.cases(["looped_encoder"]):
        check(arch, kind)


def test_the_example_trains_from_the_cli(example, tmp_path, capsys):
    assert main(["params", example]) == 0 and "injection" in capsys.readouterr().out
    corpus = write_text_corpus(tmp_path / "corpus.txt", 30_000)
    config = tiny_run_config(corpus, model={"arch": example, "dim": 32, "heads": 4, "ffn_dim": 48, "rounds": 3},
                             train={"max_steps": 3, "eval_every": 3})
    config["model"].pop("layers")
    code = main(["train", str(write_config(tmp_path / "c.yaml", config)), "--out", str(tmp_path / "run"),
                 "--no-progress"])
    assert code == 0 and (tmp_path / "run" / "checkpoints" / "last" / "model.safetensors").exists()


def test_the_example_config_loads_with_the_plugin(example):
    from looped.train.config import load_run_config

    config = load_run_config(EXAMPLE.with_name("injected_loop.yaml"))
    assert config.model.arch == example and config.model.rounds == 4


def test_loading_twice_registers_once(example, monkeypatch):
    monkeypatch.setenv("LOOPED_PLUGINS", f"{EXAMPLE},{EXAMPLE.parent / '..' / 'examples' / EXAMPLE.name}")
    registry.load_plugins()
    registry.load_plugins()
    assert arch_names().count(example) == 1


def test_a_module_name_and_an_entry_point_are_plugins(tmp_path, monkeypatch):
    (tmp_path / "my_plugin_mod.py").write_text(
        "from looped.models.loop import LoopConfig, LoopedLM\n"
        "from looped.models.registry import register\n"
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class C(LoopConfig):\n    arch: str = 'plugin_loop_by_module'\n"
        "@register('plugin_loop_by_module', C)\n"
        "class M(LoopedLM):\n    pass\n")
    (tmp_path / "my_ep_mod.py").write_text((tmp_path / "my_plugin_mod.py").read_text()
                                           .replace("plugin_loop_by_module", "plugin_loop_by_entry_point"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LOOPED_PLUGINS", "my_plugin_mod")
    monkeypatch.setattr(registry, "_entry_point_plugins", lambda: ("my_ep_mod",))
    assert get_arch("plugin_loop_by_module").config().arch == "plugin_loop_by_module"
    assert "plugin_loop_by_entry_point" in arch_names()


def test_a_broken_plugin_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOOPED_PLUGINS", str(tmp_path / "missing.py"))
    with pytest.raises(ConfigError, match=r"LOOPED_PLUGINS: cannot import plugin .*missing\.py.*no such file"):
        arch_names()
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.setenv("LOOPED_PLUGINS", str(tmp_path / "broken.py"))
    assert main(["params", "transformer"]) == 2
    err = capsys.readouterr().err.strip()
    assert "broken.py" in err and "RuntimeError: boom" in err and len(err.splitlines()) == 1
    monkeypatch.setenv("LOOPED_PLUGINS", "")  # the registry works again once the plugin is gone
    assert "transformer" in arch_names()
