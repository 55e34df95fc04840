"""Run folders survive kills and refuse misuse; checkpoints prove themselves; mistakes end in one line.

Each test builds the failure it prevents: the folder a kill between two renames leaves, two trainers on one
folder, Ctrl-C during training, a torn metrics line, a flipped byte in the weights ...
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from looped.cli import main
from looped.config import from_dict
from looped.train import RunConfig, Trainer, TrainingError
from looped.train import checkpoint as ckpt
from looped.train.run_folder import RunFolderError, RunLock
from looped.train.trainer import StopSignals

from helpers import tiny_run_config, write_config, write_text_corpus

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def corpus(tmp_path):
    return write_text_corpus(tmp_path / "corpus.txt", n_bytes=30_000)


def small(corpus, **train):
    """A run that takes a few milliseconds per update: 32-symbol blocks, no evaluation until the end."""
    return tiny_run_config(corpus, model={"context_length": 32}, data={"block_size": 33},
                           train={"eval_every": 0, "eval_batches": 1, **train})


def trainer(config: dict, out: Path, **kw) -> Trainer:
    return Trainer(from_dict(RunConfig, config), out, progress=False, log=lambda m: None, **kw)


def cli(capsys, *argv):
    """(exit status, stdout, stderr); `train` prints its log before the JSON summary, which is kept."""
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    text = out.out[out.out.index("\n{") + 1:] if argv[0] == "train" and "\n{" in out.out else out.out
    return code, text, out.err


def step_of(folder: Path) -> int:
    return json.loads((folder / "trainer.json").read_text())["step"]


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


# --- 1. run folders ----------------------------------------------------------------------------------------

def killed_between_renames(corpus, run: Path) -> None:
    """The state a kill between `last` -> `.last.old` and tmp -> `last` leaves: the update-2 checkpoint as
    .last.old, the complete update-4 one still under its temporary name, no `last`; plus the debris of an
    earlier kill mid-write (a temporary folder without its manifest)."""
    trainer(small(corpus, max_steps=4), run).run(stop_after=2)
    checkpoints = run / "checkpoints"
    shutil.copytree(checkpoints / "last", checkpoints / "older")
    trainer(small(corpus, max_steps=4), run, resume=True).run()
    os.replace(checkpoints / "last", checkpoints / ".last.tmp-k1ll3d")
    os.replace(checkpoints / "older", checkpoints / ".last.old")
    (checkpoints / ".last.tmp-half").mkdir()
    shutil.copy(checkpoints / ".last.old" / "config.json", checkpoints / ".last.tmp-half")
    shutil.copy(checkpoints / ".last.old" / "model.safetensors", checkpoints / ".last.tmp-half")


def test_a_kill_between_the_renames_loses_nothing(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    killed_between_renames(corpus, run)
    checkpoints = run / "checkpoints"
    assert ckpt.find_checkpoint(checkpoints / "last") == checkpoints / ".last.tmp-k1ll3d"
    code, out, err = cli(capsys, "eval", run, "--no-progress", "--eval-batches", 1)
    assert code == 0 and json.loads(out)["checkpoint"].endswith(".last.tmp-k1ll3d"), err
    # a fresh start must not restart from update 0 over it (nor delete anything)
    before = sorted(p.name for p in checkpoints.iterdir())
    code, _, err = cli(capsys, "train", write_config(tmp_path / "c.yaml", small(corpus, max_steps=4)),
                       "--out", run, "--no-progress")
    assert code == 2 and "already holds a run" in err and "--resume" in err and one_line(err)
    assert sorted(p.name for p in checkpoints.iterdir()) == before
    # --resume puts the newest complete checkpoint back as `last` and removes the leftovers
    code, _, err = cli(capsys, "train", "--out", run, "--resume", "--no-progress")
    assert code == 0, err
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best", "last"] and step_of(checkpoints / "last") == 4


def test_a_start_without_resume_refuses_a_folder_holding_a_run(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 5.0}\n')
    code, _, err = cli(capsys, "train", write_config(tmp_path / "c.yaml", small(corpus, max_steps=2)),
                       "--out", run, "--no-progress")
    assert code == 2 and "metrics.jsonl" in err and "--resume" in err and one_line(err)
    assert [p.name for p in run.iterdir()] == ["metrics.jsonl"]  # nothing touched, not even a lock file
    assert (run / "metrics.jsonl").read_text() == '{"step": 1, "loss": 5.0}\n'


def test_a_second_trainer_on_a_locked_folder_names_the_holder(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    trainer(small(corpus, max_steps=4), run).run(stop_after=2)
    lock = RunLock.acquire(run)  # another process's lock, as far as the trainer can tell (one flock per open)
    try:
        code, _, err = cli(capsys, "train", "--out", run, "--resume", "--no-progress")
    finally:
        lock.release()
    assert code == 2 and f"pid {os.getpid()}" in err and one_line(err)
    assert step_of(run / "checkpoints" / "last") == 2  # the locked run was not touched
    assert cli(capsys, "train", "--out", run, "--resume", "--no-progress")[0] == 0  # released with the process


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.005)


def test_ctrl_c_checkpoints_and_resuming_equals_an_uninterrupted_run(corpus, tmp_path, capsys):
    """A real trainer process gets SIGINT mid-run; a second trainer meanwhile is refused with the first's pid;
    resuming to the end gives the same weights, bit for bit, as a run never interrupted."""
    config = write_config(tmp_path / "c.yaml", small(corpus, max_steps=100))
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "looped.cli", "train", str(config), "--out", str(run),
                             "--no-progress"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 2)
        with pytest.raises(RunFolderError, match=f"pid {proc.pid}"):  # what a second trainer meets (CLI: above)
            RunLock.acquire(run)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "looped train --out" in err and "--resume" in err, err
    stopped = step_of(run / "checkpoints" / "last")
    assert 2 <= stopped < 100
    code, _, err = cli(capsys, "train", "--out", run, "--resume", "--no-progress")
    assert code == 0, err
    trainer(small(corpus, max_steps=100), tmp_path / "straight").run()
    assert same_weights(run / "checkpoints" / "last", tmp_path / "straight" / "checkpoints" / "last")


def test_a_second_signal_aborts_at_once():
    with StopSignals() as signals:
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.received == "SIGINT"  # the first one only asks for a checkpoint and a stop
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs before this returns


def test_a_kill_during_the_final_evaluation_keeps_the_run(corpus, tmp_path, monkeypatch):
    from looped.train import tasks as lm_task

    real_evaluate = lm_task.LMTrainTask.evaluate

    def killed(self, model, **kwargs):
        raise KeyboardInterrupt  # as a kill -9 would: nothing after this runs

    monkeypatch.setattr(lm_task.LMTrainTask, "evaluate", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer(small(corpus, max_steps=3), tmp_path / "run").run()
    assert step_of(tmp_path / "run" / "checkpoints" / "last") == 3
    monkeypatch.setattr(lm_task.LMTrainTask, "evaluate", real_evaluate)
    summary = trainer(small(corpus, max_steps=3), tmp_path / "run", resume=True).run()
    assert summary["eval"] is not None and summary["step"] == 3  # the evaluation ran, no update was redone
    events = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if "val_loss" in e] == [3]


def test_periodic_checkpoints_in_the_cpu_recipes_that_had_none(tmp_path):
    from looped.experiments import clw_study

    config = clw_study.ClwStudy(tmp_path, tmp_path / "runs").config({"corpus": "enwik8", "row": "plain", "seed": 11})
    assert config.train.eval_every == 0 and 0 < config.train.checkpoint_every <= 100


def test_a_torn_metrics_line_does_not_block_resume(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    trainer(small(corpus, max_steps=4), run).run(stop_after=2)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "loss": 4.1')  # the process died mid-line
    messages = []
    Trainer(from_dict(RunConfig, small(corpus, max_steps=4)), run, resume=True, progress=False,
            log=messages.append).run()
    assert any("torn last line" in m for m in messages)
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if "loss" in e] == [1, 2, 3, 4]
    # damage before the end is not silently dropped: the error names the file and the line
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([lines[0], "garbage", *lines[1:]]) + "\n")
    code, _, err = cli(capsys, "train", "--out", run, "--resume", "--set", "train.max_steps=5", "--no-progress")
    assert code == 2 and "metrics.jsonl: line 2" in err and one_line(err)


def test_resume_may_change_the_budget_but_nothing_that_changes_the_computation(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    trainer(small(corpus, max_steps=2), run).run()
    code, _, err = cli(capsys, "train", "--out", run, "--resume", "--set", "optim.lr=0.5", "--no-progress")
    assert code == 2 and "optim.lr" in err and one_line(err)
    code, out, err = cli(capsys, "train", "--out", run, "--resume", "--set", "train.max_steps=4",
                         "--set", "train.log_every=2", "--no-progress", "--json")
    assert code == 0 and json.loads(out)["step"] == 4, err
    assert ckpt.read_config(run / "checkpoints" / "last").train.max_steps == 4
    code, _, err = cli(capsys, "train", "--out", run, "--no-progress")  # no config and no --resume
    assert code == 2 and "--resume" in err and one_line(err)


def test_one_budget_override_replaces_the_other(corpus, tmp_path):
    from looped.experiments import drt
    from looped.train import load_run_config

    path = write_config(tmp_path / "c.yaml", small(corpus, max_steps=None, max_targets=1000))
    assert load_run_config(path, ["train.max_steps=7"]).train.max_steps == 7
    config = drt.run_config("graph", overrides={"train": {"max_steps": 5}})
    assert (config.train.max_steps, config.train.max_targets) == (5, None)


# --- 2. checkpoints that prove themselves ---------------------------------------------------------------

def test_a_flipped_byte_in_the_weights_is_refused(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    trainer(small(corpus, max_steps=2), run).run()
    weights = run / "checkpoints" / "last" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01  # one bit of one weight: still a valid safetensors file
    weights.write_bytes(bytes(data))
    code, _, err = cli(capsys, "eval", run, "--no-progress")
    assert code == 2 and "model.safetensors: damaged" in err and one_line(err)
    code, _, err = cli(capsys, "train", "--out", run, "--resume", "--set", "train.max_steps=3", "--no-progress")
    assert code == 2 and "damaged" in err
    # a checkpoint from before checksums (no manifest) still loads
    (run / "checkpoints" / "last" / "manifest.json").unlink()
    assert cli(capsys, "eval", run, "--no-progress", "--eval-batches", 1)[0] == 0


def test_a_non_finite_gradient_stops_before_the_step(corpus, tmp_path, monkeypatch):
    from looped.train import tasks as lm_task

    class InfiniteGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * float("inf")

    real_loss, calls = lm_task.LMTrainTask.loss, {"n": 0}

    def poisoned(model, batch):
        calls["n"] += 1
        loss = real_loss(model, batch)
        return InfiniteGradient.apply(loss) if calls["n"] == 3 else loss  # the loss itself stays finite

    monkeypatch.setattr(lm_task.LMTrainTask, "loss", staticmethod(poisoned))
    with pytest.raises(TrainingError, match="gradient norm became (nan|inf) at update 3"):
        trainer(small(corpus, max_steps=5, checkpoint_every=1), tmp_path / "run").run()
    last = tmp_path / "run" / "checkpoints" / "last"
    assert step_of(last) == 2
    assert all(torch.isfinite(v).all() for v in load_file(str(last / "model.safetensors")).values())


def test_a_non_finite_validation_loss_never_reaches_a_checkpoint(corpus, tmp_path, monkeypatch):
    from looped.train import tasks as lm_task

    monkeypatch.setattr(lm_task.LMTrainTask, "evaluate", lambda self, model, **kw: {"loss": float("nan")})
    with pytest.raises(TrainingError, match="validation loss became nan at update 2"):
        trainer(small(corpus, max_steps=4, eval_every=2), tmp_path / "run").run()
    assert not (tmp_path / "run" / "checkpoints" / "last").exists()


def test_best_before_any_evaluation_falls_back_to_last_with_a_note(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    trainer(small(corpus, max_steps=4, select="best"), run).run(stop_after=2)
    code, out, err = cli(capsys, "eval", run, "--no-progress", "--eval-batches", 1)
    assert code == 0 and "no best checkpoint yet" in err and json.loads(out)["checkpoint"].endswith("last")
    code, _, err = cli(capsys, "eval", run, "--which", "best", "--no-progress")
    assert code == 2 and "checkpoints/best" in err and one_line(err)


def test_safetensors_files_get_the_permissions_of_the_json_beside_them(corpus, tmp_path):
    mask = os.umask(0o022)
    try:
        trainer(small(corpus, max_steps=1), tmp_path / "run").run()
    finally:
        os.umask(mask)
    folder = tmp_path / "run" / "checkpoints" / "last"
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert set(modes.values()) == {0o644}, modes


# --- 4. one line, never a traceback ----------------------------------------------------------------------

def test_a_full_disk_names_the_users_file_not_a_temporary_one(tmp_path, monkeypatch):
    import errno

    from looped.train.checkpoint import atomic_write_text

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError) as caught:
        atomic_write_text(tmp_path / "table.md", "x")
    assert str(tmp_path / "table.md") in str(caught.value) and ".tmp" not in str(caught.value)


def test_an_unwritable_output_folder_is_one_line(corpus, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, _, err = cli(capsys, "train", write_config(tmp_path / "c.yaml", small(corpus, max_steps=1)),
                       "--out", blocker / "run", "--no-progress")
    assert code == 2 and str(blocker) in err and one_line(err)


def test_eval_options_that_cannot_apply_are_one_line(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    trainer(small(corpus, max_steps=1), run).run()
    for argv, needle in ((["--exit-threshold", "0.1"], "transformer has no early exit"),
                         (["--exit-threshold", "-1"], "--exit-threshold must be >= 0"),
                         (["--batch-size", "0"], "--batch-size must be >= 1"),
                         (["--set", "model.rounds=3"], "--set model.rounds: eval takes only data.* keys")):
        code, _, err = cli(capsys, "eval", run, "--no-progress", *argv)
        assert code == 2 and needle in err and one_line(err), (argv, err)
    code, _, err = cli(capsys, "generate", run, "--max-new-tokens", "-3")
    assert code == 2 and "--max-new-tokens must be >= 0" in err and one_line(err)
    code, _, err = cli(capsys, "params", "transformer", "--solve-ffn", "-5")
    assert code == 2 and "--solve-ffn: a parameter count must be >= 1" in err and one_line(err)
    code, _, err = cli(capsys, "train", "--out", run, "--resume", "--stop-after", "0")
    assert code == 2 and "--stop-after: the number of updates must be >= 1" in err and one_line(err)


def test_a_workspace_model_decodes_an_empty_chunk():
    from looped.models import build_model, get_arch

    for arch in ("workspace", "workspace_retention"):
        model = build_model(get_arch(arch).tiny_config()).eval()
        tokens = torch.randint(0, 200, (1, 5))
        state = model.init_state(1)
        with torch.no_grad():
            first, empty, rest = (model.decode(tokens[:, :3], state), model.decode(tokens[:, :0], state),
                                  model.decode(tokens[:, 3:], state))
            full = model(tokens)
        assert empty.shape[1] == 0
        assert torch.allclose(torch.cat([first, rest], 1), full, atol=1e-5), arch


def test_graph_hard_negatives_exist_at_every_allowed_hop_count():
    from looped.data.tasks import get_task, rng_for

    task = get_task("graph", hard_negatives=True)
    for hops in range(14, task.max_difficulty + 1):
        batch = task.sample(rng_for(hops), 6, hops)
        labels = [task.label_of(batch, i) for i in range(len(batch))]
        assert labels == batch.labels.tolist() and 0 in labels and 1 in labels, hops


# --- 3. commands check what they are given ---------------------------------------------------------------

def synthetic_task_run(folder: Path, task: dict) -> Path:
    """A checkpoint folder of a (untrained) model on a synthetic task: what eval/generate must not score."""
    from looped.models import build_model

    config = from_dict(RunConfig, {"model": {"arch": "transformer", "dim": 32, "heads": 4, "layers": 1,
                                             "ffn_dim": 32, "context_length": 64},
                                   "task": task, "train": {"max_steps": 1}})
    ckpt.write_folder_atomically(folder, {"config.json": ckpt.config_json(config),
                                          "model.safetensors": ckpt.model_file(build_model(config.model))})
    return folder


def test_eval_and_generate_refuse_a_run_of_another_task(tmp_path, capsys):
    parity = synthetic_task_run(tmp_path / "parity", {"kind": "sequence", "name": "parity"})
    for command in ("eval", "generate"):
        code, out, err = cli(capsys, command, parity)
        assert code == 2 and "parity task" in err and "looped lengths" in err and one_line(err) and not out


def test_data_info_describes_a_synthetic_task(capsys):
    code, out, _ = cli(capsys, "data", "info", REPO / "configs/rlt/cpu/parity_rlt1.yaml")
    info = json.loads(out)
    assert code == 0 and info["task"]["name"] == "parity" and "parity" in info["describe"] and "corpus" not in info


def test_eval_file_scores_each_whole_file(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    trainer(small(corpus, max_steps=1), run).run()
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    one.write_text("in the beginning " * 10)  # 170 bytes: 5 blocks of 33
    two.write_text("the quick brown fox " * 20)  # 400 bytes: 12 blocks
    code, out, err = cli(capsys, "eval", run, "--file", one, two, "--no-progress")
    results = json.loads(out)
    assert code == 0, err
    # the tail is scored too: 5 blocks of 33 (32 targets each) + a 5-byte tail (4); 12 blocks + a 4-byte tail (3)
    assert [(r["file"], r["blocks"], r["targets"]) for r in results] == [(str(one), 6, 164), (str(two), 13, 387)]
    code, out, _ = cli(capsys, "eval", run, "--file", tmp_path / "one.txt", "--no-progress")
    assert json.loads(out)["bits_per_byte"] == results[0]["bits_per_byte"]  # a file alone scores the same
    code, _, err = cli(capsys, "eval", run, "--set", f"data.path={two}", "--no-progress")
    assert code == 0 and "held-out = last" in err and "--file scores a whole file" in err
    code, _, err = cli(capsys, "eval", run, "--file", tmp_path / "missing.txt", "--no-progress")
    assert code == 2 and "missing.txt" in err and one_line(err)


def test_task_names_agree_across_commands(capsys):
    for name in ("logic", "s5_swaps", "graph_hard", "boolean", "s5"):
        code, out, err = cli(capsys, "data", "show", name, "--n", "1")
        assert code == 0 and out.startswith(f"--- {name} example 1"), err
    assert "T" in cli(capsys, "data", "show", "logic", "--n", "1", "--seed", "3")[1]
    code, out, _ = cli(capsys, "reproduce", "drt", "--status", "--tasks", "boolean", "--seeds", "42")
    assert code == 0 and "logic" in out
    code, _, err = cli(capsys, "reproduce", "rlt", "--status", "--rows", "nope")
    assert code == 2 and "--rows: unknown name 'nope'" in err and one_line(err)
    code, out, err = cli(capsys, "reproduce", "rlt", "--status", "--rows", "lstm", "--tasks", "mod5_flat",
                         "--seeds", "42")  # the CPU-only calibration row was refused by name
    assert code == 0 and "lstm" in out, err
    code, _, err = cli(capsys, "reproduce", "drt", "--status", "--archs", "nope")  # was "0 to do", silently
    assert code == 2 and "--archs: unknown name 'nope'" in err and one_line(err)


def test_study_paths_resolve_against_the_repository_not_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "reproduce", "rlt", "--status", "--seeds", "42")
    assert code == 0 and f"results in {REPO / 'results' / 'rlt_cpu'}" in err
    assert str(REPO / "results" / "rlt_cpu" / "results.csv") in out and " 0 done" not in out.splitlines()[0]
    assert not list(tmp_path.iterdir())


def test_benchmarks_leave_the_committed_results_alone_unless_asked():
    from looped.bench import clw, ddp, decode, rlt, think, train

    for module in (clw, ddp, decode, rlt, think, train):
        assert module.DEFAULT_OUT.parts[0] == "runs", module.DEFAULT_OUT


def test_ctrl_c_in_a_study_stops_it_without_marking_the_run_failed(tmp_path, monkeypatch):
    from looped.experiments import study
    from looped.experiments.results import ResultTable
    from looped.train.trainer import TrainingInterrupted

    def interrupted(*args):
        raise TrainingInterrupted("stopped by SIGINT at update 3/8, checkpoint saved")

    monkeypatch.setattr(study, "train_run", interrupted)
    table = ResultTable(tmp_path / "results.csv", ["task", "status"], ["task"])
    with pytest.raises(TrainingInterrupted):
        study.train_or_record_failure(table, {"task": "parity"}, None, tmp_path / "run", False, print)
    assert table.rows == []  # a later `reproduce` resumes the run instead of skipping it as failed


def test_user_errors_are_one_line_but_a_bug_keeps_its_traceback(monkeypatch, capsys):
    import argparse

    from looped.cli.common import run_command

    def mistake(args):
        raise ValueError("--n must be >= 1, got 0")

    def bug(args):
        raise IndexError("index -1 is out of bounds for dimension 1 with size 0")

    assert run_command(argparse.Namespace(func=mistake)) == 2
    assert capsys.readouterr().err == "looped: error: --n must be >= 1, got 0\n"
    with pytest.raises(IndexError):  # not hidden behind a one-line message
        run_command(argparse.Namespace(func=bug))
    monkeypatch.setenv("LOOPED_DEBUG", "1")
    with pytest.raises(ValueError):
        run_command(argparse.Namespace(func=mistake))


def test_a_diverged_model_scores_an_infinite_perplexity_not_a_crash(corpus, tmp_path, capsys):
    """optim.lr=1e6: the weights after one update are finite but huge; their held-out NLL is large enough that
    exp(NLL) overflowed a float (OverflowError traceback) instead of reporting an infinite perplexity."""
    code, _, err = cli(capsys, "train", write_config(tmp_path / "c.yaml", small(corpus, max_steps=4, eval_every=1)),
                       "--out", tmp_path / "run", "--set", "optim.lr=1e6", "--no-progress")
    assert code == 2 and "became nan" in err and "lower optim.lr" in err and one_line(err)
    events = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["val_ppl"] for e in events if "val_ppl" in e] == [float("inf")]
    last = tmp_path / "run" / "checkpoints" / "last"
    assert all(torch.isfinite(v).all() for v in load_file(str(last / "model.safetensors")).values())


def test_python_dash_m_looped_runs_the_cli():
    # `python -m looped` had no __main__ module ("No module named looped.__main__")
    proc = subprocess.run([sys.executable, "-m", "looped", "params", "nope-arch"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "nope-arch" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
