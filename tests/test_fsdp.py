"""FSDP2 on CPU/gloo: 2 processes train the five row kinds with the same losses as one process, checkpoints hold
the full weights (single-process eval and resume read them), and older checkpoints with a 0-d gamma still load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import tiny_run_config, write_text_corpus
from test_train import free_port

from looped.config import from_dict, to_dict
from looped.models import get_arch
from looped.train import RunConfig, Trainer, TrainingError, load_model

REPO = Path(__file__).resolve().parents[1]
ROWS = ("transformer", "shared_loop", "anchored_loop", "workspace", "rlt")
CONTEXT = 32


def row_config(corpus: Path, arch: str) -> dict:
    model = {k: v for k, v in to_dict(get_arch(arch).tiny_config()).items() if v is not None}
    model.update(arch=arch, context_length=CONTEXT)
    config = tiny_run_config(corpus, data={"block_size": CONTEXT + 1},
                             train={"max_steps": 3, "batch_size": 4, "micro_batch_size": 1, "eval_every": 0,
                                    "eval_batches": 1, "parallel": "fsdp"})
    config["model"] = model
    return config


def losses(run: Path) -> list[float]:
    return [e["loss"] for e in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in e]


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory):
    """Every row once in one process and once under a single 2-process torchrun launch."""
    tmp = tmp_path_factory.mktemp("fsdp")
    corpus = write_text_corpus(tmp / "corpus.txt", 12_000)
    configs = {arch: row_config(corpus, arch) for arch in ROWS}
    configs["workspace_split"] = configs["workspace"]
    (tmp / "rows.json").write_text(json.dumps(configs))
    # the two ranks started directly (what torchrun would set up; its launcher process costs seconds here)
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, str(REPO / "tests" / "fsdp_rows.py"), str(tmp / "rows.json"),
                               str(tmp / "fsdp")], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE",
                                   "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for rank in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    for arch, config in configs.items():
        if arch.endswith("_split"):
            continue
        Trainer(from_dict(RunConfig, config), tmp / "single" / arch, progress=False, log=lambda _: None).run()
    return tmp


@pytest.mark.parametrize("arch", ROWS)
def test_fsdp_losses_equal_single_process(fsdp_runs, arch):
    single, sharded = losses(fsdp_runs / "single" / arch), losses(fsdp_runs / "fsdp" / arch)
    assert len(single) == len(sharded) == 3
    rel = max(abs(a - b) / abs(a) for a, b in zip(single, sharded))
    assert rel <= 1e-5, (arch, single, sharded)
    share = json.loads((fsdp_runs / "fsdp" / arch / "sharding.json").read_text())
    assert share["local"] <= share["total"] / 2 + 1_000, share  # each rank holds about half


def test_an_fsdp_run_resumes_under_fsdp_on_the_same_curve(fsdp_runs):
    """The gathered checkpoint is re-sharded on resume (weights and Adam moments): the curve goes on unchanged."""
    whole, split = losses(fsdp_runs / "fsdp" / "workspace"), losses(fsdp_runs / "fsdp" / "workspace_split")
    assert len(split) == len(whole) == 3
    assert max(abs(a - b) / abs(a) for a, b in zip(whole, split)) <= 1e-6, (whole, split)


@pytest.mark.parametrize("arch", ("transformer", "workspace"))
def test_fsdp_checkpoint_holds_the_full_weights(fsdp_runs, arch):
    """One model.safetensors with every full-shape tensor: scored in one process it reproduces the held-out loss
    the 2-process run logged (weights compared directly would differ by Adam's sign flips on ~0 gradients)."""
    from looped.eval import evaluate_lm
    from looped.data import load_streams, to_blocks

    run = fsdp_runs / "fsdp" / arch
    sharded, config = load_model(run / "checkpoints" / "last")
    single, _ = load_model(fsdp_runs / "single" / arch / "checkpoints" / "last")
    assert {k: v.shape for k, v in sharded.state_dict().items()} == {k: v.shape for k, v in single.state_dict().items()}
    streams = load_streams(config.data)
    blocks = to_blocks(streams.heldout, config.data.block_size, name="held-out")
    result = evaluate_lm(sharded, blocks, batch_size=config.train.eval_batch_size, max_batches=1)
    logged = [e for e in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "val_loss" in e]
    assert result["nll"] == pytest.approx(logged[-1]["val_loss"], rel=1e-6)


def test_fsdp_checkpoint_resumes_in_one_process(fsdp_runs):
    """The gathered optimizer moments are the single-process layout: one more update in one process works."""
    run = fsdp_runs / "fsdp" / "workspace"
    config = json.loads((run / "checkpoints" / "last" / "config.json").read_text())
    config["train"]["max_steps"] = 4
    for folder in ("checkpoints/last",):
        path = run / folder / "config.json"
        path.write_text(json.dumps(config))
    summary = Trainer(from_dict(RunConfig, config), run, resume=True, progress=False, log=lambda _: None).run()
    assert summary["step"] == 4 and len(losses(run)) == 4


def test_a_checkpoint_with_a_0d_gamma_still_loads(fsdp_runs, tmp_path):
    """Checkpoints from before gamma became 1-D (FSDP cannot shard 0-d parameters)."""
    source = fsdp_runs / "single" / "workspace" / "checkpoints" / "last"
    old = tmp_path / "old"
    old.mkdir()
    for name in ("config.json", "trainer.json"):
        (old / name).write_text((source / name).read_text())
    weights = load_file(str(source / "model.safetensors"))
    weights["workspace.gamma"] = weights["workspace.gamma"].reshape(())
    save_file(weights, str(old / "model.safetensors"), metadata={"arch": "workspace"})
    trainer = load_file(str(source / "trainer.safetensors"))
    moments = [k for k, v in trainer.items() if k.startswith("optim.") and v.shape == (1,)]
    assert moments  # gamma's Adam moments are in there
    save_file({k: v.reshape(()) if k in moments else v for k, v in trainer.items()}, str(old / "trainer.safetensors"))
    model, _ = load_model(old)
    assert model.workspace.gamma.shape == (1,) and model.workspace.gamma.item() == weights["workspace.gamma"].item()
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    os.replace(old, run / "checkpoints" / "last")
    config = json.loads((run / "checkpoints" / "last" / "config.json").read_text())
    config["train"]["max_steps"] = 4
    (run / "checkpoints" / "last" / "config.json").write_text(json.dumps(config))
    summary = Trainer(from_dict(RunConfig, config), run, resume=True, progress=False, log=lambda _: None).run()
    assert summary["step"] == 4


def test_wandb_and_parallel_may_change_on_resume_other_keys_may_not(tmp_path):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    base = tiny_run_config(corpus, train={"max_steps": 2})
    Trainer(from_dict(RunConfig, base), tmp_path / "run", progress=False, log=lambda _: None).run(stop_after=1)
    changed = tiny_run_config(corpus, train={"max_steps": 2, "parallel": "fsdp", "wandb": None})
    summary = Trainer(from_dict(RunConfig, changed), tmp_path / "run", resume=True, progress=False,
                      log=lambda _: None).run()
    assert summary["step"] == 2
    other = tiny_run_config(corpus, train={"max_steps": 2, "seed": 7})  # the budget may change; the seed may not
    with pytest.raises(TrainingError, match="train.seed"):
        Trainer(from_dict(RunConfig, other), tmp_path / "run", resume=True, progress=False, log=lambda _: None).run()
