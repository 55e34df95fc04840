"""The optional W&B sink, offline (WANDB_MODE=offline): the run id lives in the run folder and a resumed training
run continues the same W&B run."""

from __future__ import annotations

import json
import re

import pytest

from helpers import tiny_run_config, write_text_corpus

wandb = pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'looped[wandb]')")

from looped.config import from_dict  # noqa: E402
from looped.train import RunConfig, Trainer  # noqa: E402
from looped.train.tracking import ID_FILE  # noqa: E402


def offline_runs(out):
    """W&B's offline session folders, oldest first: `offline-run-<time>-<run id>`, with `-1`, `-2`... appended
    when two sessions start within the same second."""
    return sorted(p.name for p in (out / "wandb").glob("offline-run-*"))


def of_run(folder, run_id):
    return re.search(rf"-{run_id}(-\d+)?$", folder) is not None


def test_resume_continues_the_same_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    config = from_dict(RunConfig, tiny_run_config(corpus, train={"max_steps": 4, "eval_every": 2,
                                                                  "wandb": {"project": "tests"}}))
    out = tmp_path / "run"
    Trainer(config, out, progress=False, log=lambda _: None).run(stop_after=2)  # "killed" after 2 updates
    run_id = (out / ID_FILE).read_text().strip()
    first = offline_runs(out)
    assert len(first) == 1 and of_run(first[0], run_id)
    Trainer(config, out, resume=True, progress=False, log=lambda _: None).run()
    wandb.teardown()  # stop W&B's background service: everything it holds is now in the .wandb files
    runs = offline_runs(out)
    assert (out / ID_FILE).read_text().strip() == run_id
    assert len(runs) == 2 and all(of_run(name, run_id) for name in runs)  # one W&B run, two sessions
    # the resumed session logged the final evaluation (the .wandb log holds each value as its JSON text)
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    records = (out / "wandb" / runs[-1] / f"run-{run_id}.wandb").read_bytes()
    assert logged[-1]["step"] == 4 and json.dumps(logged[-1]["val_loss"]).encode() in records
    first_records = (out / "wandb" / runs[0] / f"run-{run_id}.wandb").read_bytes()
    assert json.dumps(logged[-1]["val_loss"]).encode() not in first_records


def test_a_new_run_folder_gets_a_new_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    config = from_dict(RunConfig, tiny_run_config(corpus, train={"max_steps": 1, "wandb": {"project": "tests"}}))
    ids = []
    for name in ("a", "b"):
        Trainer(config, tmp_path / name, progress=False, log=lambda _: None).run()
        ids.append((tmp_path / name / ID_FILE).read_text().strip())
    assert ids[0] != ids[1]

