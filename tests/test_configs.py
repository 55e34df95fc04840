"""Every shipped YAML loads into a valid, typed RunConfig; the quickstart YAML is what quickstart runs."""

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

import parameter_formulas
from looped.train.config import QUICKSTART
from looped.config import ConfigError, from_dict, parse_overrides, to_dict
from looped.models import build_model
from looped.train import RunConfig, load_run_config

REPO_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CONFIGS = sorted(REPO_CONFIGS.rglob("*.yaml"))


def test_the_config_glob_sees_every_shipped_family():
    """The parametrized load test below is only as good as this glob: a moved folder would silently test nothing."""
    folders = {p.relative_to(REPO_CONFIGS).parts[0] for p in CONFIGS}
    assert {"clw", "drt", "rlt", "examples", "quickstart", "quickstart.yaml"} <= folders
    assert all(len(list((REPO_CONFIGS / name).rglob("*.yaml"))) >= 3 for name in ("clw", "drt", "rlt", "examples"))


def stated_parameters(path: Path) -> int | None:
    """The count a recipe's header comment states ('# ... row workspace: 918,383 parameters ...'), if any."""
    header = "".join(line for line in path.read_text().splitlines(keepends=True)[:3] if line.startswith("#"))
    found = re.search(r"([\d,]+) parameters", header)
    return int(found.group(1).replace(",", "")) if found else None


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_shipped_config_loads(path):
    """It loads, survives a YAML round trip, and builds the model its header promises: the stated parameter count
    (a recipe matched at equal parameters goes stale when a row's code changes) and, for the LM rows, each
    component's count by formula (parameter_formulas.py)."""
    config = load_run_config(path)
    assert isinstance(config, RunConfig)
    again = from_dict(RunConfig, yaml.safe_load(yaml.safe_dump(to_dict(config))))
    assert again == config
    with torch.device("meta"):  # the larger-budget recipes hold 100M parameters
        counts = build_model(config.model).parameter_counts()
    stated = stated_parameters(path)
    if stated is not None:
        assert counts["total"] == stated, f"the header says {stated:,} parameters, the model has {counts['total']:,}"
    if config.model.arch in parameter_formulas.FORMULAS:
        assert counts == parameter_formulas.expected_counts(config.model.arch, config.model)


def test_quickstart_yaml_matches_the_command():
    path = Path(__file__).resolve().parents[1] / "configs/quickstart.yaml"
    assert load_run_config(path) == from_dict(RunConfig, QUICKSTART)


def test_overrides_parse_yaml_scalars():
    tree = parse_overrides(["train.lr=3e-4", "model.dim=64", "data.path=a=b.txt", "train.tensorboard=true"])
    assert tree == {"train": {"lr": 3e-4, "tensorboard": True}, "model": {"dim": 64}, "data": {"path": "a=b.txt"}}


def test_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"^optim\.betas: expected a list"):
        load_run_config(base=QUICKSTART, overrides=["optim.betas={a: 1}"])
    with pytest.raises(ConfigError, match=r"^optim\.betas must be two numbers"):  # a scalar is a list of one
        load_run_config(base=QUICKSTART, overrides=["optim.betas=0.9"])
    with pytest.raises(ConfigError, match=r"^train\.max_steps / train\.max_targets"):
        load_run_config(base=QUICKSTART, overrides=["train.max_targets=100", "train.max_steps=5"])
    # one budget alone replaces the other (a recipe counted in updates, extended in targets)
    assert load_run_config(base=QUICKSTART, overrides=["train.max_targets=100"]).train.max_steps is None
    with pytest.raises(ConfigError, match=r"^train\.precision: 'fp16' is not one of"):
        load_run_config(base=QUICKSTART, overrides=["train.precision=fp16"])
    with pytest.raises(ConfigError, match=r"^model\.context_length"):
        load_run_config(base=QUICKSTART, overrides=["model.context_length=100"])


def test_a_scalar_sets_a_list_key_and_an_empty_value_means_null(tmp_path):
    """`--set data.heldout_paths=x.txt` was refused ("expected a list") and `--set data.path=` read the empty
    string as a path (`.: not a regular file`)."""
    base = {**QUICKSTART, "data": {"corpus": "raw", "path": "all.txt", "block_size": 129}}
    config = load_run_config(base=base, overrides=["data.path=", "data.train_paths=a.txt",
                                                   "data.heldout_paths=b.txt"])
    assert config.data.path is None
    assert (config.data.train_paths, config.data.heldout_paths) == (["a.txt"], ["b.txt"])
    assert parse_overrides(["data.path="]) == {"data": {"path": None}}
    both = {**base, "data": {"corpus": "raw", "path": "all.txt", "train_paths": ["x"], "block_size": 129}}
    unset = load_run_config(base=both, overrides=["data.train_paths="])
    assert unset.data.train_paths == []


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "configs/examples").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_example_configs_evaluate_about_20_times_and_select_the_best(path):
    """Evaluating once at the end hides over-fitting: the held-out curve needs points, and the checkpoint that
    `eval` / `generate` use should be the best one."""
    config = load_run_config(path)
    train = config.train
    updates = train.max_steps or train.max_targets // (train.batch_size * (config.data.block_size - 1))
    assert train.eval_every > 0 and 15 <= updates // train.eval_every <= 25
    assert train.select == "best"


def test_a_recipe_written_before_the_input_kind_rename_still_loads(tmp_path):
    """Reasoning configs (and the run folders' saved configs) once named the input layout `task_kind`, its token
    value 'sequence'; they must load as the same model, saying what changed, rather than stop at 'unknown key'."""
    shipped = REPO_CONFIGS / "quickstart/logic.yaml"
    old = tmp_path / "logic.yaml"
    old.write_text(shipped.read_text().replace("input_kind: tokens", "task_kind: sequence"))
    with pytest.warns(FutureWarning, match=r"model\.task_kind is now model\.input_kind"):
        assert load_run_config(old) == load_run_config(shipped)
    with pytest.raises(ConfigError, match=r"^model\.task_kind: the old name of input_kind"):
        load_run_config(old, overrides=["model.input_kind=tokens"])


def old_logic_recipe(tmp_path: Path) -> Path:
    old = tmp_path / "logic.yaml"
    shipped = (REPO_CONFIGS / "quickstart/logic.yaml").read_text()
    old.write_text(shipped.replace("input_kind: tokens", "task_kind: sequence"))
    return old


def test_the_cli_says_an_old_spelling_in_one_line_and_library_use_keeps_python_warnings(tmp_path):
    """From the command line, the rename warning is one line like looped's errors, not Python's file:line plus
    a source line; the hook is the CLI's alone: once main() returns, warnings show as Python shows them."""
    from looped.cli import main

    old = old_logic_recipe(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO_CONFIGS.parent), "PYTHONWARNINGS": ""}
    done = subprocess.run([sys.executable, "-m", "looped.cli", "config", "show", str(old)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["looped: warning: model.task_kind is now model.input_kind (value 'sequence' "
                                        "is now 'tokens'); the old spelling still loads"]
    with warnings.catch_warnings():  # (it restores showwarning itself: check before it does)
        python_format = warnings.showwarning
        assert main(["config", "show", str(old)]) == 0
        assert warnings.showwarning is python_format
