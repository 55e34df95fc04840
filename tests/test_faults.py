"""Faults that used to end in a traceback, a silent wrong result or a blocked retry (issue 29): each test is the
failure its fix prevents."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
from safetensors.torch import save_file

from looped.cli import main
from looped.train import load_run_config, Trainer
from looped.train import checkpoint as ckpt
from looped.train.trainer import TrainingError

from helpers import tiny_run_config, write_config, write_text_corpus


def quiet(message):
    pass


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_text_corpus(tmp_path_factory.mktemp("faults") / "corpus.txt", 30_000)


def tiny(corpus, **train) -> dict:
    return tiny_run_config(corpus, train={"max_steps": 2, "eval_every": 0, "batch_size": 2, "eval_batches": 1,
                                          **train})


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("looped: error: "), err
    return err[0]


# --- a start that fails before its first update leaves nothing behind --------------------------------------
class FakeWandbError(Exception):
    pass


def fake_wandb(monkeypatch):
    """A wandb whose init fails as it does without an API key (its errors derive from wandb.errors.Error)."""
    module = types.ModuleType("wandb")
    module.errors = types.SimpleNamespace(Error=FakeWandbError)

    def init(**kwargs):
        raise FakeWandbError("api_key not configured (no-tty). call wandb.login(key=[your_api_key])")

    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)


@pytest.mark.parametrize("wandb", ["missing", "no API key"])
def test_a_wandb_start_up_failure_is_one_line_and_the_retry_is_not_refused(wandb, corpus, tmp_path, monkeypatch,
                                                                             capsys):
    if wandb == "missing":
        monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    else:
        fake_wandb(monkeypatch)
    config = write_config(tmp_path / "c.yaml", tiny(corpus))
    out = tmp_path / "run"
    argv = ["train", str(config), "--out", str(out), "--no-progress"]
    assert main(argv + ["--set", "train.wandb.project=x"]) == 2
    assert "train.wandb" in one_error_line(capsys)
    assert not out.exists()  # no config.yaml (the retry would be refused), no .run.lock
    assert main(argv) == 0


def test_a_failed_start_in_an_existing_folder_removes_only_what_it_wrote(corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    config = load_run_config(base=tiny(corpus, wandb={"project": "x"}))
    with pytest.raises(Exception, match="wandb"):
        Trainer(config, out, progress=False, log=quiet).run()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


# --- "last good checkpoint" ----------------------------------------------------------------------------------
def test_a_divergence_does_not_call_the_checkpoint_of_the_diverged_weights_good(corpus, tmp_path):
    config = load_run_config(base=tiny(corpus, max_steps=40, checkpoint_every=1), overrides=["optim.lr=1e6",
                                                                                              "optim.grad_clip=0"])
    trainer = Trainer(config, tmp_path / "run", progress=False, log=quiet)
    with pytest.raises(TrainingError) as caught:
        trainer.run()
    message = str(caught.value)
    last = tmp_path / "run/checkpoints/last"
    saved = ckpt.checkpoint_step(last)
    assert saved == trainer.step >= 1  # checkpointed every update, so `last` holds the weights that diverged
    assert "the last good checkpoint is" not in message, message
    assert f"holds the weights of update {saved} that gave this, so it is not a good checkpoint" in message


# --- push --dry-run: what would be uploaded, for review, without network or token ----------------------------
def test_push_dry_run_stages_the_files_and_card_without_the_hub(corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # works without the extra: nothing is uploaded
    run = tmp_path / "run"
    Trainer(load_run_config(base=tiny(corpus)), run, progress=False, log=quiet).run()
    staged = tmp_path / "review"
    assert main(["push", str(run), "me/tiny", "--dry-run", str(staged)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["uploaded"] is False and result["staged"] == str(staged)
    assert sorted(p.name for p in staged.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert "# me/tiny" in (staged / "README.md").read_text()
    assert main(["push", str(run), "me/tiny", "--dry-run", str(staged)]) == 2  # never mixed with an old staging
    assert "new or empty folder" in one_error_line(capsys)
