"""Hub failures are one line (issue 29): connection errors of whichever HTTP client the installed huggingface_hub
uses, and pushing without a token (refused before any network call)."""

from __future__ import annotations

import importlib

import pytest

from helpers import tiny_run_config, write_text_corpus

hf = pytest.importorskip("huggingface_hub", reason="the hub extra is not installed (pip install 'looped[hub]')")

from looped import cli  # noqa: E402
from looped.config import from_dict  # noqa: E402
from looped.train import RunConfig, Trainer  # noqa: E402


def connection_errors() -> list[Exception]:
    """A connection error of each HTTP client importable here (huggingface_hub has used requests, httpx, httpx2)."""
    found = []
    for module_name in ("httpx2", "httpx", "requests"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        error = getattr(module, "ConnectError", None) or module.exceptions.ConnectionError
        found.append(error("[Errno -2] Name or service not known"))
    found.append(ConnectionError("[Errno 101] Network is unreachable"))
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hubfaults")
    corpus = write_text_corpus(folder / "corpus.txt", 30_000)
    config = from_dict(RunConfig, tiny_run_config(corpus, train={"max_steps": 2, "eval_every": 0, "batch_size": 2}))
    Trainer(config, folder / "run", progress=False, log=lambda _: None).run()
    return folder / "run"


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("looped: error: "), err
    return err[0]


@pytest.mark.parametrize("error", connection_errors(), ids=lambda e: type(e).__module__ + "." + type(e).__name__)
def test_push_without_network_is_one_line(error, run, monkeypatch, capsys):
    def unreachable(self, *args, **kwargs):
        raise error

    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf.HfApi, "create_repo", unreachable)
    assert cli.main(["push", str(run), "me/tiny"]) == 2
    line = one_error_line(capsys)
    assert "hf:me/tiny" in line and "cannot be reached" in line, line


@pytest.mark.parametrize("error", connection_errors(), ids=lambda e: type(e).__module__ + "." + type(e).__name__)
def test_reading_a_hub_id_without_network_is_one_line(error, monkeypatch, capsys):
    def unreachable(*args, **kwargs):
        raise error

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf, "snapshot_download", unreachable)
    assert cli.main(["eval", "hf:me/tiny", "--no-progress"]) == 2
    assert "hf:me/tiny" in one_error_line(capsys)


def test_push_without_a_token_is_refused_before_any_network_call(run, monkeypatch, capsys):
    def no_call(self, *args, **kwargs):
        raise AssertionError("a network call was made without a token")

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(hf, "get_token", lambda: None)
    monkeypatch.setattr(hf.HfApi, "create_repo", no_call)
    assert cli.main(["push", str(run), "me/tiny"]) == 2
    assert "not logged in" in one_error_line(capsys)


# --- train hf:ORG/NAME --resume never continues an unrelated local run ------------------------------------
def test_resuming_a_pushed_run_refuses_a_folder_holding_another_run(run, tmp_path, monkeypatch, capsys):
    from hub_cache import FakeHubApi, offline_cache

    from looped.train.checkpoint import checkpoint_step
    from looped.train.pretrained import push

    cache = offline_cache(tmp_path, monkeypatch)
    config = from_dict(RunConfig, {**tiny_run_config(run.parent / "corpus.txt"),
                                   "train": {"max_steps": 4, "eval_every": 0, "batch_size": 2, "threads": 1}})
    Trainer(config, tmp_path / "origin", progress=False, log=lambda _: None).run(stop_after=1)
    push(str(tmp_path / "origin"), "me/a", with_trainer=True, api=FakeHubApi(cache))
    # the same recipe started separately: equal configs, another run (the default --out runs/a could hold it)
    Trainer(config, tmp_path / "other", progress=False, log=lambda _: None).run(stop_after=3)
    before = (tmp_path / "other/checkpoints/last/model.safetensors").read_bytes()
    assert cli.main(["train", "hf:me/a", "--resume", "--out", str(tmp_path / "other"), "--no-progress"]) == 2
    assert "holds a different run" in one_error_line(capsys)
    assert (tmp_path / "other/checkpoints/last/model.safetensors").read_bytes() == before
    assert checkpoint_step(tmp_path / "other/checkpoints/last") == 3
    # its own folder is the same run: it continues there
    assert cli.main(["train", "hf:me/a", "--resume", "--out", str(tmp_path / "origin"), "--no-progress"]) == 0
    assert checkpoint_step(tmp_path / "origin/checkpoints/last") == 4


def test_checkpoints_from_before_run_ids_are_told_apart_by_their_config(run, tmp_path, monkeypatch, capsys):
    import json

    from hub_cache import FakeHubApi, offline_cache

    from looped.train.pretrained import push

    def without_run_id(folder):
        meta = json.loads((folder / "trainer.json").read_text())
        meta.pop("run_id")
        (folder / "trainer.json").write_text(json.dumps(meta))
        (folder / "manifest.json").unlink()  # an old checkpoint: no run id, no manifest

    cache = offline_cache(tmp_path, monkeypatch)
    base = tiny_run_config(run.parent / "corpus.txt")
    for name, lr in (("origin", 3e-3), ("other", 1e-3)):
        config = from_dict(RunConfig, {**base, "optim": {**base["optim"], "lr": lr},
                                       "train": {"max_steps": 4, "eval_every": 0, "batch_size": 2, "threads": 1}})
        Trainer(config, tmp_path / name, progress=False, log=lambda _: None).run(stop_after=1)
        without_run_id(tmp_path / name / "checkpoints/last")
    push(str(tmp_path / "origin"), "me/old", with_trainer=True, api=FakeHubApi(cache))
    assert cli.main(["train", "hf:me/old", "--resume", "--out", str(tmp_path / "other"), "--no-progress"]) == 2
    assert "their configs differ at optim.lr" in one_error_line(capsys)
