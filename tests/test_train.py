"""Trainer: budgets, schedules, bit-identical resume, DDP equivalence, checkpoints, bad input."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from looped.cli import main
from looped.config import from_dict
from looped.train import RunConfig, Trainer, TrainingError
from looped.train.schedule import learning_rate
from looped.train.trainer import param_groups

from helpers import tiny_run_config, write_config, write_text_corpus

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def corpus(tmp_path):
    return write_text_corpus(tmp_path / "corpus.txt")


def losses(run: Path) -> list[tuple[int, float]]:
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    return [(e["step"], e["loss"]) for e in lines if "loss" in e]


def weights(run: Path, which="last"):
    return load_file(str(run / "checkpoints" / which / "model.safetensors"))


def train(config: dict, out: Path, **kw):
    return Trainer(from_dict(RunConfig, config), out, progress=False, log=lambda m: None, **kw)


def test_schedules():
    kw = dict(lr=1.0, total_steps=10, warmup_steps=4)
    assert [learning_rate(s, schedule="constant", **kw) for s in (0, 3, 4, 9)] == [0.25, 1.0, 1.0, 1.0]
    assert learning_rate(4, schedule="cosine", **kw) == 1.0
    assert learning_rate(10, schedule="cosine", min_lr=0.1, **kw) == pytest.approx(0.1)
    assert learning_rate(7, schedule="cosine", **kw) == pytest.approx(0.5)


def test_weight_decay_groups():
    from looped.models import build_model, get_arch
    model = build_model(get_arch("transformer").tiny_config())
    decay, no_decay = param_groups(model, 0.1)
    decayed = {id(p) for p in decay["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in decayed}
    assert names and all(n.endswith("weight") and "norm" not in n for n in names)
    assert "embed.weight" not in names and "positions.weight" not in names and "head.weight" in names


def test_budget_in_targets(corpus, tmp_path):
    cfg = tiny_run_config(corpus, train={"max_steps": None, "max_targets": 5 * 4 * 512 - 1})
    summary = train(cfg, tmp_path / "run").run()
    assert summary["total_steps"] == 5  # ceil(targets / (batch * 512))


def test_resume_is_bit_identical(corpus, tmp_path):
    cfg = tiny_run_config(corpus, train={"micro_batch_size": 2})
    train(cfg, tmp_path / "straight").run()
    train(cfg, tmp_path / "split").run(stop_after=3)
    assert losses(tmp_path / "split")[-1][0] == 3
    train(cfg, tmp_path / "split", resume=True).run()
    assert losses(tmp_path / "straight") == losses(tmp_path / "split")
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "split")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("sampler", ["historical", "independent"])
def test_sampler_modes_train(corpus, tmp_path, sampler):
    cfg = tiny_run_config(corpus, data={"sampler": sampler, "data_seed": 11}, train={"max_steps": 2})
    assert train(cfg, tmp_path / sampler).run()["step"] == 2


def test_independent_sampler_fixes_data_order_across_archs(corpus, tmp_path):
    """With --sampler independent the block order no longer depends on the model's initialisation."""
    from looped.train.tasks import LMTrainTask
    cfg = from_dict(RunConfig, tiny_run_config(corpus, data={"sampler": "independent", "data_seed": 5}))
    orders = []
    for burn in (0, 1000):
        torch.manual_seed(0)
        torch.rand(burn)  # a different model would consume a different amount of the global stream
        task = LMTrainTask(cfg, log=lambda m: None)
        orders.append(task.sampler.next_indices(6).tolist())
    assert orders[0] == orders[1]


def test_best_checkpoint_and_selection(corpus, tmp_path):
    cfg = tiny_run_config(corpus, train={"select": "best"})
    summary = train(cfg, tmp_path / "run").run()
    meta = json.loads((tmp_path / "run/checkpoints/best/trainer.json").read_text())
    evals = [json.loads(l) for l in (tmp_path / "run/metrics.jsonl").read_text().splitlines() if "val_loss" in l]
    best = min(evals, key=lambda e: (e["val_loss"], e["step"]))
    assert meta["step"] == best["step"] == summary["best_step"]


def test_best_checkpoint_keeps_the_earliest_step_on_ties(corpus, tmp_path, monkeypatch):
    from looped.train import tasks as lm_task
    losses = iter([2.0, 1.5, 1.5, 1.5])  # evaluations at updates 2, 4, 6, 8: a three-way tie for the minimum
    monkeypatch.setattr(lm_task.LMTrainTask, "evaluate", lambda self, model, **kwargs: {"loss": next(losses)})
    cfg = tiny_run_config(corpus, train={"select": "best", "eval_every": 2})
    summary = train(cfg, tmp_path / "run").run()
    assert summary["best_step"] == 4
    assert json.loads((tmp_path / "run/checkpoints/best/trainer.json").read_text())["step"] == 4


def test_nan_loss_stops_and_keeps_the_checkpoint_it_came_from(corpus, tmp_path, monkeypatch):
    from looped.train import tasks as lm_task
    cfg = tiny_run_config(corpus, train={"checkpoint_every": 2, "eval_every": 0})
    trainer = train(cfg, tmp_path / "run")
    real_loss, calls = lm_task.LMTrainTask.loss, {"n": 0}

    def poisoned(model, batch):
        calls["n"] += 1
        loss = real_loss(model, batch)
        return loss * float("nan") if calls["n"] == 5 else loss

    monkeypatch.setattr(lm_task.LMTrainTask, "loss", staticmethod(poisoned))
    # update 5's loss comes from the weights of update 4: that checkpoint is kept, but not called good
    with pytest.raises(TrainingError, match="loss became nan at update 5.*holds the weights of update 4 that gave"):
        trainer.run()
    meta = json.loads((tmp_path / "run/checkpoints/last/trainer.json").read_text())
    assert meta["step"] == 4
    assert all(torch.isfinite(v).all() for v in weights(tmp_path / "run").values())


def test_resume_refuses_a_different_config(corpus, tmp_path):
    cfg = tiny_run_config(corpus)
    train(cfg, tmp_path / "run").run(stop_after=2)
    cfg["optim"]["lr"] = 1e-2
    with pytest.raises(TrainingError, match=r"optim\.lr"):
        train(cfg, tmp_path / "run", resume=True).run()
    with pytest.raises(TrainingError, match="already holds a run"):
        train(tiny_run_config(corpus), tmp_path / "run").run()
    with pytest.raises(TrainingError, match="no checkpoint to resume"):
        train(cfg, tmp_path / "empty", resume=True).run()


def test_checkpoint_is_self_contained_and_pickle_free(corpus, tmp_path):
    train(tiny_run_config(corpus, train={"max_steps": 2}), tmp_path / "run").run()
    folder = tmp_path / "run/checkpoints/last"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "manifest.json", "model.safetensors",
                                                        "trainer.json", "trainer.safetensors"]
    assert json.loads((folder / "config.json").read_text())["model"]["arch"] == "transformer"
    assert not list((tmp_path / "run/checkpoints").glob(".*"))  # no temporary folders left behind


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("override,needle", [
    ("model.dimm=3", "model.dimm: unknown key"),
    ("train.batch_size=big", "train.batch_size: expected an integer"),
    ("model.arch=nope", "model.arch: unknown architecture"),
    ("model.dim=30", "not divisible by heads"),
    ("data.corpus=books", "data.corpus"),
])
def test_bad_config_is_one_line(corpus, tmp_path, capsys, override, needle):
    path = write_config(tmp_path / "c.yaml", tiny_run_config(corpus))
    code, _, err = run_cli(capsys, "train", path, "--set", override, "--out", tmp_path / "r", "--no-progress")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_bad_files_are_one_line(corpus, tmp_path, capsys):
    cfg = tiny_run_config(corpus)
    cfg["data"]["path"] = str(tmp_path / "missing.txt")
    path = write_config(tmp_path / "c.yaml", cfg)
    code, _, err = run_cli(capsys, "train", path, "--out", tmp_path / "r", "--no-progress")
    assert code == 2 and "missing.txt" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "empty.txt").write_text("")
    code, _, err = run_cli(capsys, "train", path, "--set", f"data.path={tmp_path / 'empty.txt'}", "--out",
                           tmp_path / "r", "--no-progress")
    assert code == 2 and "empty" in err.lower() and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "eval", tmp_path)
    assert code == 2 and "not a checkpoint folder" in err
    code, _, err = run_cli(capsys, "train", tmp_path / "nope.yaml")
    assert code == 2 and "config file not found" in err


def test_corrupt_checkpoint_is_one_line(corpus, tmp_path, capsys):
    train(tiny_run_config(corpus, train={"max_steps": 2}), tmp_path / "run").run()
    folder = tmp_path / "run/checkpoints/last"
    (folder / "manifest.json").unlink()  # as written before checksums: the file itself must be checked
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    code, _, err = run_cli(capsys, "eval", folder)
    assert code == 2 and "corrupt safetensors" in err and len(err.strip().splitlines()) == 1


def test_eval_and_generate_cli(corpus, tmp_path, capsys):
    train(tiny_run_config(corpus, train={"max_steps": 2}), tmp_path / "run").run()
    code, out, _ = run_cli(capsys, "eval", tmp_path / "run", "--no-progress")
    result = json.loads(out)
    assert code == 0 and result["bits_per_byte"] == pytest.approx(result["nll"] / math.log(2))
    code, out, _ = run_cli(capsys, "generate", tmp_path / "run", "--prompt", "The", "--max-new-tokens", 20,
                           "--seed", 3)
    assert code == 0 and out.startswith("The")
    code, again, _ = run_cli(capsys, "generate", tmp_path / "run", "--prompt", "The", "--max-new-tokens", 20,
                             "--seed", 3)
    assert again == out  # seeded sampling is reproducible
    code, long_text, _ = run_cli(capsys, "generate", tmp_path / "run", "--prompt", "x", "--max-new-tokens", 600)
    assert code == 0 and long_text.startswith("x")  # past the 512-position window generation slides it
    code, _, err = run_cli(capsys, "generate", tmp_path / "run", "--prompt", "x", "--top-p", "0")
    assert code == 2 and "top_p" in err and len(err.strip().splitlines()) == 1


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args, env_extra=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", **(env_extra or {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "-m", "looped.cli", *map(str, args)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_a_single_process_checkpoint_resumes_under_ddp_on_the_same_curve_and_its_weights_load_in_one(corpus, tmp_path):
    """One torchrun launch (each costs ~25 s of process start-up here): a run stopped after 4 updates in one
    process is resumed by 2 DDP ranks through the CLI. Their updates 5-8 must follow the single-process curve
    (sharded batches, all-reduced gradients, the sampler restored across a change of world size), and the checkpoint
    DDP writes at the end must hold the single run's weights under the plain names (no `module.` prefix)."""
    cfg = tiny_run_config(corpus, train={"batch_size": 4, "micro_batch_size": 1, "eval_every": 0})
    path = write_config(tmp_path / "c.yaml", cfg)
    train(cfg, tmp_path / "single").run()
    train(cfg, tmp_path / "split").run(stop_after=4)
    torchrun(["train", path, "--out", tmp_path / "split", "--resume", "--no-progress"])
    single, resumed = losses(tmp_path / "single"), losses(tmp_path / "split")
    assert [s for s, _ in resumed] == [s for s, _ in single] == list(range(1, 9))
    rel = max(abs(a - b) / abs(a) for (_, a), (_, b) in zip(single[4:], resumed[4:]))
    assert rel <= 1e-5, rel
    mine, theirs = weights(tmp_path / "single"), weights(tmp_path / "split")
    assert mine.keys() == theirs.keys()
    assert all(torch.allclose(mine[k], theirs[k], rtol=1e-4, atol=1e-6) for k in mine)


def test_bf16_autocast_trains(corpus, tmp_path):
    summary = train(tiny_run_config(corpus, train={"precision": "bf16", "max_steps": 2}), tmp_path / "run").run()
    assert math.isfinite(summary["eval"]["nll"])


def test_tensorboard_missing_is_a_clear_error(corpus, tmp_path):
    try:
        import tensorboard  # noqa: F401
        pytest.skip("tensorboard is installed here; the error path cannot be exercised")
    except ImportError:
        pass
    with pytest.raises(TrainingError, match="tensorboard package is not installed"):
        train(tiny_run_config(corpus, train={"tensorboard": True}), tmp_path / "run").run()


def test_atomic_writes_keep_the_old_file_on_failure_and_use_plain_permissions(tmp_path):
    from looped.train.checkpoint import atomic_path, atomic_write_text

    target = tmp_path / "results.csv"
    atomic_write_text(target, "old\n")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            open(tmp, "w").write("half")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["results.csv"]
    mask = os.umask(0o022)
    try:
        atomic_write_text(target, "new\n")
    finally:
        os.umask(mask)
    assert target.read_text() == "new\n" and target.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600


def test_wall_time_is_logged_and_a_resume_continues_the_clock(corpus, tmp_path, monkeypatch):
    """`looped plot --x seconds` plots against the run's training wall time: a resumed run must not restart it
    at 0 (its curve would fold back on itself), and evaluation lines take the time of their update."""
    from looped.eval.curves import series

    clock = iter(range(0, 10_000, 10))  # every perf_counter call advances 10 s: the times are exact
    import looped.train.trainer as trainer_module

    monkeypatch.setattr(trainer_module.time, "perf_counter", lambda: float(next(clock)))
    cfg = tiny_run_config(corpus, train={"max_steps": 6, "log_every": 1, "eval_every": 3})
    train(cfg, tmp_path / "run").run(stop_after=3)
    train(cfg, tmp_path / "run", resume=True).run()
    lines = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    seconds = [e["seconds"] for e in lines if "loss" in e]
    assert len(seconds) == 6 and all(b > a for a, b in zip(seconds, seconds[1:])), seconds
    xs, _ = series(lines, "val_loss", "seconds")
    assert xs == [s for e, s in zip([e for e in lines if "loss" in e], seconds) if e["step"] in (3, 6)]
    from looped.eval.curves import plot_runs

    assert "@ seconds" in plot_runs([tmp_path / "run"], tmp_path / "curves.png", x="seconds")
    assert (tmp_path / "curves.png").exists()
