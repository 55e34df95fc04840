"""Without the optional extras every integration stops with one line that says what to install (the packages are
hidden here, so this runs whether or not they are installed)."""

from __future__ import annotations

import sys

import pytest

from helpers import tiny_run_config, write_text_corpus

from looped import cli
from looped.config import from_dict
from looped.train import RunConfig, Trainer


@pytest.mark.parametrize("argv, package, extra", [
    (["eval", "hf:me/model"], "huggingface_hub", "looped[hub]"),
    (["push", "runs/none", "me/model"], "huggingface_hub", "looped[hub]"),
    (["lm-eval", "runs/none", "--tasks", "wikitext"], "lm_eval", "looped[eval]"),
])
def test_a_command_of_a_missing_extra_is_one_line(argv, package, extra, monkeypatch, capsys):
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")] + [package]:
        monkeypatch.setitem(sys.modules, name, None)  # importing the package or any submodule raises ImportError
    monkeypatch.delitem(sys.modules, "looped.integrations.lm_eval", raising=False)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and extra in err, err


def test_train_wandb_without_wandb_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    config = from_dict(RunConfig, tiny_run_config(corpus, train={"max_steps": 1, "wandb": {"project": "x"}}))
    with pytest.raises(RuntimeError, match=r"pip install 'looped\[wandb\]'"):
        Trainer(config, tmp_path / "run", progress=False, log=lambda _: None).run()
