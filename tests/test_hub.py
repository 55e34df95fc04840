"""Hub checkpoints offline: `looped push` into a local folder laid out exactly as the Hub cache stores a repository,
then `hf:ORG/NAME[@REV]` and `looped.from_pretrained` read it back with HF_HUB_OFFLINE set."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import tiny_run_config, write_text_corpus
from hub_cache import FakeHubApi, add_commit, offline_cache

hf = pytest.importorskip("huggingface_hub", reason="the hub extra is not installed (pip install 'looped[hub]')")

import looped  # noqa: E402
from looped.train.checkpoint import resolve_checkpoint  # noqa: E402
from looped import cli  # noqa: E402
from looped.config import from_dict  # noqa: E402
from looped.train import RunConfig, Trainer  # noqa: E402
from looped.train.pretrained import push  # noqa: E402


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    return offline_cache(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hubrun")
    corpus = write_text_corpus(folder / "corpus.txt", 30_000)
    config = from_dict(RunConfig, tiny_run_config(corpus, train={"max_steps": 4, "eval_every": 4}))
    Trainer(config, folder / "run", progress=False, log=lambda _: None).run()
    return folder / "run"


def test_push_then_load_by_hub_id_round_trips_the_weights(run, offline_hub):
    api = FakeHubApi(offline_hub)
    result = push(str(run), "me/tiny", api=api)
    # the trainer state stays behind unless asked; the card is generated
    assert result["files"] == ["README.md", "config.json", "model.safetensors"]
    assert ("create_repo", "me/tiny", False) in api.calls
    model, config = looped.from_pretrained("hf:me/tiny")
    local, _ = looped.from_pretrained(run)
    assert config.model.arch == "transformer"
    for (name, a), (_, b) in zip(model.state_dict().items(), local.state_dict().items()):
        assert torch.equal(a, b), name


def test_model_card_metadata_names_arch_parameters_corpus_and_score(run, offline_hub):
    push(str(run), "me/card", api=FakeHubApi(offline_hub))
    folder = resolve_checkpoint("hf:me/card")
    card = hf.ModelCard.load(folder / "README.md")
    meta = card.data.to_dict()
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [e for e in events if "val_bits_per_byte" in e][-1]
    assert meta["library_name"] == "looped" and "transformer" in meta["tags"]
    info = meta["looped"]
    assert info["arch"] == "transformer" and info["corpus"] == "raw" and info["version"] == looped.__version__
    assert info["heldout_split"] == "last 0.1 of the file"  # tiny_run_config holds out the last 10 %
    assert info["parameters"] == looped.from_pretrained(run)[0].parameter_counts()["total"]
    assert info["heldout"]["val_bits_per_byte"] == pytest.approx(logged["val_bits_per_byte"])
    assert "looped train config.json" in card.text and "hf:me/card" in card.text


def test_with_trainer_uploads_the_resume_state_on_a_branch(run, offline_hub):
    api = FakeHubApi(offline_hub)
    result = push(str(run), "me/full", revision="v1", with_trainer=True, api=api)
    assert "trainer.safetensors" in result["files"] and "trainer.json" in result["files"]
    assert ("create_branch", "me/full", "v1") in api.calls
    assert (resolve_checkpoint("hf:me/full@v1") / "trainer.safetensors").is_file()


def test_a_run_pushed_with_its_trainer_state_resumes_bit_identically(run, offline_hub, tmp_path):
    config = from_dict(RunConfig, json.loads((run / "checkpoints" / "last" / "config.json").read_text()))
    Trainer(config, tmp_path / "half", progress=False, log=lambda _: None).run(stop_after=2)
    push(str(tmp_path / "half"), "me/half", with_trainer=True, api=FakeHubApi(offline_hub))
    assert cli.main(["train", "hf:me/half", "--resume", "--out", str(tmp_path / "resumed"), "--no-progress"]) == 0
    resumed = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    whole = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in resumed if "loss" in e] == [3, 4]
    assert [e["loss"] for e in resumed if "loss" in e] == [e["loss"] for e in whole if "loss" in e][2:]


def test_a_run_pushed_without_trainer_state_is_not_resumed(run, offline_hub, tmp_path, capsys):
    push(str(run), "me/weights", api=FakeHubApi(offline_hub))
    assert cli.main(["train", "hf:me/weights", "--resume", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "--with-trainer" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_cli_eval_accepts_a_hub_id(run, offline_hub, capsys):
    push(str(run), "me/evaluated", api=FakeHubApi(offline_hub))
    assert cli.main(["eval", "hf:me/evaluated", "--eval-batches", "1", "--no-progress"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert cli.main(["eval", str(run), "--eval-batches", "1", "--no-progress"]) == 0
    assert remote["nll"] == json.loads(capsys.readouterr().out)["nll"]


def test_missing_repository_or_revision_offline_is_one_line(offline_hub, capsys):
    add_commit(offline_hub, "me/other", {"config.json": b"{}"})
    for hf_id, why in (("hf:me/absent", "HF_HUB_OFFLINE"), ("hf:me/other@nope", "HF_HUB_OFFLINE"),
                       ("hf:not-an-id", "not a Hub id")):
        assert cli.main(["eval", hf_id]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err and hf_id in err, err
