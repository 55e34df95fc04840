"""`train.init_from: hf:ORG/NAME` without a network: the Hub id resolves through looped.hub.snapshot to a folder
holding a pushed checkpoint, and a new run starts from exactly its weights with a fresh optimizer and step 0.
When the id cannot be resolved (no hub extra; offline with nothing cached) the run stops with one line."""

from __future__ import annotations

import shutil
import sys

import pytest
from safetensors.torch import load_file

from helpers import tiny_run_config, train_tiny, trainer_at_update_zero, write_config, write_text_corpus
from looped import cli, hub
from looped.config import from_dict
from looped.train import RunConfig
from looped.train.checkpoint import FILES
from looped.train.config import load_run_config


TINY_TRANSFORMER = {"arch": "transformer", "dim": 32, "heads": 4, "layers": 2, "ffn_dim": 64}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A finished tiny run (3 updates): the weights a Hub repository would hold."""
    folder = tmp_path_factory.mktemp("hubsource")
    return train_tiny(folder / "run", write_text_corpus(folder / "corpus.txt", 30_000), TINY_TRANSFORMER)


def fake_snapshot(source, tmp_path, monkeypatch) -> list[str]:
    """Make looped.hub.snapshot answer every id with a folder laid out as `looped push` uploads a checkpoint
    (config and weights, no trainer state); returns the ids it was asked for."""
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    for name in FILES:
        shutil.copy(source / "checkpoints" / "last" / name, snapshot / name)
    asked = []

    def resolve(hf_id, allow_patterns=None):
        asked.append(hf_id)
        return snapshot

    monkeypatch.setattr(hub, "snapshot", resolve)
    return asked


def fine_tune_config(tmp_path, init_from: str) -> dict:
    """The source's architecture on another text, starting from `init_from`."""
    corpus = write_text_corpus(tmp_path / "new_text.txt", 20_000, seed=3)
    return tiny_run_config(corpus, model=TINY_TRANSFORMER, data={"block_size": 65},
                           train={"max_steps": 2, "eval_every": 0, "init_from": init_from})


def test_init_from_a_hub_id_starts_from_the_pushed_weights_with_a_fresh_optimizer(source, tmp_path, monkeypatch):
    asked = fake_snapshot(source, tmp_path, monkeypatch)
    trainer = trainer_at_update_zero(from_dict(RunConfig, fine_tune_config(tmp_path, "hf:me/x")), tmp_path / "tuned")
    pushed = load_file(str(source / "checkpoints" / "last" / "model.safetensors"))
    ours = trainer.model.state_dict()
    assert asked == ["hf:me/x"]
    assert pushed.keys() == ours.keys() and all(ours[name].equal(tensor) for name, tensor in pushed.items())
    assert trainer.step == 0 and not trainer.optimizer.state  # a new run, not a resume of the pushed one


def test_a_run_from_a_hub_id_trains_and_records_the_id(source, tmp_path, monkeypatch):
    fake_snapshot(source, tmp_path, monkeypatch)
    config = write_config(tmp_path / "tune.yaml", fine_tune_config(tmp_path, "hf:me/x"))
    assert cli.main(["train", str(config), "--out", str(tmp_path / "tuned"), "--no-progress"]) == 0
    recorded = load_run_config(tmp_path / "tuned" / "config.yaml")
    assert recorded.train.init_from == "hf:me/x"  # the run says where its weights came from


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("looped: error: "), err
    return err[0]


def test_init_from_a_hub_id_without_the_hub_extra_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import huggingface_hub` raises ImportError
    config = write_config(tmp_path / "tune.yaml", fine_tune_config(tmp_path, "hf:me/x"))
    assert cli.main(["train", str(config), "--out", str(tmp_path / "tuned"), "--no-progress"]) == 2
    assert "pip install 'looped[hub]'" in one_error_line(capsys)
    assert not (tmp_path / "tuned").exists()  # a run that never started leaves no folder behind


def test_init_from_a_hub_id_offline_with_nothing_cached_is_one_line(tmp_path, monkeypatch, capsys):
    pytest.importorskip("huggingface_hub", reason="the hub extra is not installed (pip install 'looped[hub]')")
    from hub_cache import offline_cache

    offline_cache(tmp_path, monkeypatch)  # HF_HUB_OFFLINE=1 and an empty Hub cache
    config = write_config(tmp_path / "tune.yaml", fine_tune_config(tmp_path, "hf:me/absent"))
    assert cli.main(["train", str(config), "--out", str(tmp_path / "tuned"), "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert "hf:me/absent" in line and "HF_HUB_OFFLINE" in line, line
    assert not (tmp_path / "tuned").exists()
