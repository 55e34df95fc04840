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


# --- non-finite weights and scores -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lm_run(corpus, tmp_path_factory):
    run = tmp_path_factory.mktemp("lm") / "run"
    Trainer(load_run_config(base=tiny(corpus)), run, progress=False, log=quiet).run()
    return run


def rewritten_checkpoint(run, tmp_path, change) -> str:
    """A copy of the run's checkpoint with its weights changed by `change(weights)`, without a manifest (as
    checkpoints were written before manifests, so no checksum can catch it)."""
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(run / "checkpoints/last", folder)
    (folder / "manifest.json").unlink()
    weights = ckpt.read_tensors(folder / "model.safetensors")
    change(weights)
    save_file(weights, str(folder / "model.safetensors"), metadata={"arch": "transformer"})
    return str(folder)


def test_a_checkpoint_without_manifest_holding_nan_weights_is_refused(lm_run, tmp_path, capsys):
    name = sorted(k for k in ckpt.read_tensors(lm_run / "checkpoints/last/model.safetensors") if "weight" in k)[0]
    folder = rewritten_checkpoint(lm_run, tmp_path, lambda w: w[name].view(-1)[0].fill_(float("nan")))
    assert main(["eval", folder, "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert f"{folder}/model.safetensors: tensor {name} holds non-finite values" in line, line


def test_eval_of_weights_that_overflow_is_an_error_not_a_nan_score(lm_run, tmp_path, capsys):
    def overflow(weights):  # finite weights whose logits are inf - inf = NaN
        for key, value in weights.items():
            if value.is_floating_point() and value.dim() == 2:
                value.mul_(1e30)

    folder = rewritten_checkpoint(lm_run, tmp_path, overflow)
    assert main(["eval", folder, "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert folder in line and "not finite" in line and "NaN" not in capsys.readouterr().out


# --- outputs that cannot be written name the requested path ------------------------------------------------------
def test_an_unwritable_output_is_named_not_its_temporary_file(lm_run, capsys):
    assert main(["eval", str(lm_run), "--no-progress", "--eval-batches", "1", "--out", "/proc/looped.json"]) == 2
    line = one_error_line(capsys)
    assert "/proc/looped.json" in line and ".tmp" not in line, line


# --- seed 003: prompts in the task's alphabet, a readable `data show` ----------------------------------------
@pytest.fixture(scope="module")
def parity_run(tmp_path_factory):
    model = {"arch": "rlt", "dim": 16, "heads": 2, "ffn_dim": 16, "encoder_layers": 1, "decoder_layers": 1,
             "window": 4, "context_length": 64}
    config = {"model": model, "task": {"kind": "sequence", "name": "parity", "train_lengths": [3, 8],
                                       "validation_lengths": [8], "validation_size": 8},
              "train": {"max_steps": 1, "eval_every": 0, "batch_size": 4, "threads": 1}}
    run = tmp_path_factory.mktemp("parity") / "run"
    Trainer(load_run_config(base=config), run, progress=False, log=quiet).run()
    return run


def test_continue_refuses_a_prompt_outside_the_tasks_alphabet(parity_run, tmp_path, capsys):
    state = tmp_path / "chat.safetensors"
    assert main(["continue", str(parity_run), "--state", str(state), "--prompt", "abc"]) == 2
    line = one_error_line(capsys)
    assert "'a' is not a symbol of the parity task (allowed: 0 1 <BOS> <EOS>)" in line, line
    assert not state.exists()
    assert main(["continue", str(parity_run), "--state", str(state), "--prompt", "0110<EOS>",
                 "--max-new-tokens", "2"]) == 0


def test_lengths_with_a_batch_size_of_zero_is_one_line(parity_run, capsys):
    assert main(["lengths", str(parity_run), "--batch-size", "0", "--lengths", "4", "--n", "2"]) == 2
    assert "--batch-size must be >= 1, got 0" in one_error_line(capsys)


def test_data_show_does_not_print_a_label_as_a_count(capsys):
    assert main(["data", "show", "parity", "--n", "1"]) == 0
    out = capsys.readouterr().out
    assert "scored targets:" not in out and "expected output: " in out


# --- a reader racing a trainer that checkpoints every update ---------------------------------------------------
def test_loading_a_checkpoint_replaced_mid_read_retries_instead_of_calling_it_damaged(lm_run, tmp_path,
                                                                                     monkeypatch):
    import shutil

    folder = tmp_path / "last"
    shutil.copytree(lm_run / "checkpoints/last", folder)
    model, config = ckpt.load_model(folder)
    newer = {name: value + 1 for name, value in model.state_dict().items()}  # the writer's next update
    real_read_manifest = ckpt.read_manifest
    writes = []

    def manifest_after_a_concurrent_replace(path):
        if not writes:  # the trainer swaps the folder between the reader's model file and its manifest
            writes.append(path)
            ckpt.write_folder_atomically(folder, {"config.json": ckpt.config_json(config),
                                                  "model.safetensors": (newer, {"arch": "transformer"})})
        return real_read_manifest(path)

    monkeypatch.setattr(ckpt, "read_manifest", manifest_after_a_concurrent_replace)
    loaded, _ = ckpt.load_model(folder)
    assert writes and all(torch.equal(loaded.state_dict()[k], v) for k, v in newer.items())


def test_a_damaged_file_in_a_folder_that_did_not_change_is_still_refused(lm_run, tmp_path):
    import shutil

    folder = tmp_path / "last"
    shutil.copytree(lm_run / "checkpoints/last", folder)
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match="damaged file"):
        ckpt.load_model(folder)


# --- lm-eval: scores from the wrong kind of run, unknown tasks -------------------------------------------------
def fake_lm_eval(monkeypatch, known_tasks: list[str]):
    """Just enough of lm-eval for the adapter to import and `sweep` to reach its checks (which run before any
    evaluation); the real package's own behaviour is covered by tests/test_lm_eval.py where it is installed."""
    class TaskManager:
        def __init__(self, include_path=None, include_defaults=True):
            self.all_tasks = sorted(known_tasks)

    def evaluate(**kwargs):
        raise AssertionError("the checks should have refused this before any evaluation")

    modules = {"lm_eval": types.ModuleType("lm_eval"), "lm_eval.api": types.ModuleType("lm_eval.api"),
               "lm_eval.api.model": types.ModuleType("lm_eval.api.model"),
               "lm_eval.api.registry": types.ModuleType("lm_eval.api.registry"),
               "lm_eval.utils": types.ModuleType("lm_eval.utils"), "lm_eval.tasks": types.ModuleType("lm_eval.tasks")}
    modules["lm_eval.api.model"].LM = object
    modules["lm_eval.api.registry"].register_model = lambda name: (lambda cls: cls)
    modules["lm_eval.utils"].get_rolling_token_windows = modules["lm_eval.utils"].make_disjoint_window = None
    modules["lm_eval.tasks"].TaskManager = TaskManager
    modules["lm_eval"].simple_evaluate = evaluate
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "looped.integrations.lm_eval", raising=False)


@pytest.mark.parametrize("case", ["parity run", "unknown task", "batch size 0"])
def test_lm_eval_refuses_what_it_cannot_score_in_one_line(case, lm_run, parity_run, monkeypatch, capsys):
    try:
        import lm_eval  # noqa: F401
        pytest.skip("lm-eval is installed: tests/test_bad_inputs.py runs these cases against the real package")
    except ImportError:
        pass
    fake_lm_eval(monkeypatch, ["wikitext"])
    argv = {"parity run": [str(parity_run), "--tasks", "wikitext"],
            "unknown task": [str(lm_run), "--tasks", "no_such_task"],
            "batch size 0": [str(lm_run), "--tasks", "wikitext", "--batch-size", "0"]}[case]
    assert main(["lm-eval", *argv]) == 2
    line = one_error_line(capsys)
    expected = {"parity run": "not on text", "unknown task": "unknown lm-eval task 'no_such_task'",
                "batch size 0": "--batch-size must be >= 1"}[case]
    assert expected in line, line


def test_an_unwritable_output_is_refused_before_the_work(lm_run, monkeypatch, capsys):
    import looped.eval

    def no_evaluation(*args, **kwargs):
        raise AssertionError("evaluated before finding that the output cannot be written")

    monkeypatch.setattr(looped.eval, "evaluate_lm", no_evaluation)
    assert main(["eval", str(lm_run), "--no-progress", "--out", "/proc/looped/x.json"]) == 2
    assert "cannot write /proc/looped/x.json" in one_error_line(capsys)
