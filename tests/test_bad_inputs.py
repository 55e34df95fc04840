"""The CLI's error boundary, swept: every verb's numeric and path options with bad values (zero, negative, NaN,
huge, wrong type, missing file, wrong kind of run) end in exactly one stderr line `looped: error: ...` and a
non-zero exit, never a traceback and never a silent result.

Three tiny runs are trained once for the module (a byte-level LM, an RLT parity run and a DRT graph run, a few
updates each), and each case runs `looped.cli.main([...])` in-process.
"""

from __future__ import annotations

import importlib.util

import pytest

from looped.cli import main
from looped.config import from_dict
from looped.train import RunConfig, Trainer

from helpers import tiny_run_config, write_config, write_text_corpus

TINY_RLT = {"arch": "rlt", "dim": 16, "heads": 2, "ffn_dim": 16, "encoder_layers": 1, "decoder_layers": 1,
            "window": 4, "context_length": 128}
TINY_DRT = {"arch": "drt", "input_kind": "graph", "vocab_size": 27, "max_length": 20, "dim": 16, "heads": 2,
            "ffn_dim": 32, "depth_rows": 8, "steps_range": [2, 4], "layer_scale": None, "dropout": 0.0}
FEW_UPDATES = {"max_steps": 2, "eval_every": 0, "log_every": 1, "threads": 1}


def _train(config: dict, out):
    Trainer(from_dict(RunConfig, config), out, progress=False, log=lambda message: None).run()
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{lm, rlt, drt, loop, ...}: tiny trained runs (loop: a shared_loop LM), the LM's config file, an empty config,
    a copy of the LM with damaged weights and a scratch folder."""
    root = tmp_path_factory.mktemp("bad_inputs")
    corpus = write_text_corpus(root / "corpus.txt", 30_000)
    lm_config = tiny_run_config(corpus, train={**FEW_UPDATES, "batch_size": 2, "eval_batches": 1})
    rlt_config = {"model": TINY_RLT,
                  "task": {"kind": "sequence", "name": "parity", "train_lengths": [3, 8], "validation_lengths": [8],
                           "validation_size": 8},
                  "train": {**FEW_UPDATES, "batch_size": 4}}
    drt_config = {"model": TINY_DRT,
                  "task": {"kind": "reasoning", "name": "graph", "train_size": 16, "val_size": 8,
                           "train_difficulties": [1, 2], "eval_steps": [1, 2], "test_difficulties": [1],
                           "test_per_bucket": 4},
                  "train": {**FEW_UPDATES, "batch_size": 4}}
    (root / "scratch").mkdir()
    (root / "empty.yaml").write_text("# nothing but a comment\n")
    lm = _train(lm_config, root / "lm")
    loop_config = {**lm_config, "model": {**lm_config["model"], "arch": "shared_loop", "rounds": 2}}
    loop_config["model"].pop("layers", None)
    return {"lm": str(lm), "rlt": str(_train(rlt_config, root / "rlt")),
            "drt": str(_train(drt_config, root / "drt")), "cfg": str(write_config(root / "lm.yaml", lm_config)),
            "tmp": str(root / "scratch"), "empty": str(root / "empty.yaml"), "damaged": str(damaged_copy(lm)),
            "loop": str(_train(loop_config, root / "loop"))}


def damaged_copy(run):
    """A copy of `run` whose every model.safetensors is cut short (its manifest still records the whole file)."""
    import shutil

    copy = run.parent / "damaged"
    shutil.copytree(run, copy)
    for weights in copy.glob("checkpoints/*/model.safetensors"):
        weights.write_bytes(weights.read_bytes()[:100])
    return copy


# argv templates: {lm} {rlt} {drt} are run folders, {cfg} the LM's config file, {tmp} a scratch folder.
CASES = [
    # train
    "train {cfg} --out {tmp}/t1 --stop-after 0",
    "train {cfg} --out {tmp}/t2 --set train.max_steps=-1",
    "train {cfg} --out {tmp}/t3 --set train.batch_size=0",
    "train {cfg} --out {tmp}/t4 --set optim.lr=nan",
    "train {cfg} --out {tmp}/t5 --set train.max_steps=abc",
    "train {tmp}/missing.yaml --out {tmp}/t6",
    "train --out {tmp}/missing_run --resume",
    "train {cfg} --out {lm}",
    "train {cfg} --out {tmp}/t7 --stop-after x",
    # eval
    "eval --no-progress {lm} --batch-size 0",
    "eval --no-progress {lm} --batch-size -1",
    "eval --no-progress {lm} --eval-batches -1",
    "eval --no-progress {lm} --rounds 0",
    "eval --no-progress {lm} --rounds -3",
    "eval --no-progress {lm} --exit-threshold nan",
    "eval --no-progress {lm} --exit-threshold -1",
    "eval --no-progress {lm} --batch-size abc",
    "eval --no-progress {lm} --which middle",
    "eval --no-progress {lm} --file {tmp}/missing.txt",
    "eval --no-progress {lm} --out /proc/looped/x.json",
    "eval --no-progress {rlt}",
    "eval --no-progress {drt}",
    "eval {tmp}/no_such_run",
    "eval {tmp}",
    # generate
    "generate {lm} --max-new-tokens -1",
    "generate {lm} --temperature nan",
    "generate {lm} --temperature -1",
    "generate {lm} --top-k -1",
    "generate {lm} --top-p 0",
    "generate {lm} --top-p 1.5",
    "generate {lm} --top-p nan",
    "generate {lm} --threads 0",
    "generate {lm} --rounds 0",
    "generate {lm} --max-new-tokens 1000000000000",
    "generate {rlt}",
    # params
    "params transformer --solve-ffn 0",
    "params no_such_arch",
    "params transformer --set model.dim=-1",
    "params transformer --set model.dim=nan",
    "params transformer --set model=3",  # TypeError
    "params {tmp}/missing.yaml",
    # think
    "think {drt} --input ''",
    "think {drt} --input 'garbage !!'",
    "think {drt} --input 'A>B ? A B' --steps 0",
    "think {drt} --input 'A>B ? A B' --steps abc",
    "think {drt} --input 'A>B ? A B' --steps 1000000000",
    "think {lm} --input 'A>B ? A B'",
    "think {rlt} --input 'A>B ? A B'",
    # lengths
    "lengths {rlt} --batch-size 0",
    "lengths {rlt} --batch-size -1",
    "lengths {rlt} --n 0",
    "lengths {rlt} --n -5",
    "lengths {rlt} --lengths 0",
    "lengths {rlt} --lengths -4",
    "lengths {rlt} --lengths 100000000",
    "lengths {lm}",
    "lengths {drt}",
    "lengths {rlt} --out /proc/looped/x.json --n 2 --lengths 4 --quiet",
    # continue
    "continue {rlt} --state {tmp}/s1.safetensors --prompt abc",
    "continue {rlt} --state {tmp}/s2.safetensors --max-new-tokens -1",
    "continue {rlt} --state {tmp}/s3.safetensors --temperature nan",
    "continue {rlt} --state {tmp}/s4.safetensors --temperature -1",
    "continue {lm} --state {tmp}/s5.safetensors",
    "continue {drt} --state {tmp}/s6.safetensors",
    "continue {rlt} --state /proc/looped/s.safetensors",
    "continue {rlt} --state {cfg}",
    # data
    "data show parity --n -1",
    "data show parity --n 0",
    "data show parity --difficulty -1",
    "data show graph --difficulty 0",
    "data show graph --difficulty 1000000000",
    "data show parity --n abc",
    "data info {tmp}/missing.yaml",
    "data show no_such_task",
    # plot
    "plot {tmp}/no_such_run",
    "plot {lm} --smooth nan",
    "plot {lm} --smooth 1.5",
    "plot {lm} --smooth -1",
    "plot {lm} --labels a b",
    "plot {lm} --out /proc/looped/x.png",
    "plot {lm} --metrics no_such_metric",
    # push / lm-eval (whether or not their extras are installed, a bad input is one line)
    "push {lm} not-a-repo-id",
    "push {tmp}/no_such_run me/x",
    "lm-eval {rlt} --tasks wikitext",
    "lm-eval {drt} --tasks wikitext",
    "lm-eval {lm} --tasks no_such_task_xyz",
    "lm-eval {lm} --tasks wikitext --batch-size 0",
    # reproduce (--status trains nothing)
    "reproduce rlt --scale cpu --tasks no_such_task --status --out {tmp}/study",
    "reproduce clw --stop-after -5 --status --out {tmp}/study",
    "reproduce drt --stop-after nan --status --out {tmp}/study",
    "reproduce drt --archs no_such_arch --status --out {tmp}/study",
    # a --set no planned run can take: every run was "skipped" and the study exited 0 having trained nothing
    "reproduce drt --seeds 42 --set train=3 --out {tmp}/s2 --runs {tmp}/s2_runs --stop-after 0.001 --no-progress",
    # no such verb, no arguments
    "no_such_verb",
    "",
    # the sweep of session 15 (each was a traceback, a silent result or work started before the refusal)
    "train {cfg} --out {tmp}/t8 --set train.max_steps=0",  # trained 0 updates and exited 0
    "train {cfg} --out {tmp}/t9 --set train.max_targets=0",
    "train {cfg} --out {tmp}/t10 --set train=3",  # TypeError (a section given a value)
    "train {cfg} --out {tmp}/t11 --set model=transformer",
    "quickstart --task parity --out {tmp}/q1 --set train.max_steps=0",  # TypeError
    "params {empty}",  # an empty config: every default (the KJV model), silently
    "config show {empty}",
    "data info {empty}",
    "data show parity --n 1000000000000",  # MemoryError
    "lengths {rlt} --n 1000000000000",  # MemoryError
    "depth {drt} --max-factor 1e30 --out {tmp}/depth.json",  # OverflowError
    "eval --no-progress {loop} --rounds 1000000000",  # an endless forward, silently
    "generate {loop} --rounds 1000000000",
    "lens {loop} --depth 1000000000",
    "push {damaged} me/x --dry-run {tmp}/staged",  # staged a damaged checkpoint and exited 0
    "bench train --batch 0 --out {tmp}/bench.json",  # RuntimeError deep in torch
    "bench ddp --procs 0 --out {tmp}/bench.json",  # ZeroDivisionError
    "bench scaling --pairs 0 --out {tmp}/bench.json",
]

# Bad inputs whose one line must also name the right thing (an earlier one-line error named the wrong one).
NAMED = [
    ("push {lm} me/x --dry-run /proc/looped/x", "cannot write /proc/looped/x"),  # named .x.tmp-XXXX
    ("data show parity --seed -1", "--seed must be >= 0"),  # "expected non-negative integer"
    ("params {lm}", "a folder, not a config file (a run folder's config is RUN/config.yaml)"),  # "unknown arch"
    ("data info {lm}", "a folder, not a config file"),  # "config file not found" of a folder that exists
    # lm-eval's options reached its task loading (a download error, or a hang) before they were refused
    ("lm-eval {lm} --tasks wikitext --limit nan", "--limit must be"),
    ("lm-eval {lm} --tasks wikitext --limit -1", "--limit must be"),
    ("lm-eval {lm} --tasks wikitext --num-fewshot -1", "--num-fewshot must be >= 0"),
    ("lm-eval {lm} --tasks wikitext --rounds 0", "fixed depth"),
    ("lm-eval {lm} --tasks wikitext --exit-threshold nan", "--exit-threshold must be"),
    ("lm-eval {lm} --tasks wikitext --exit-threshold 0.5", "has no early exit"),
    ("lm-eval {lm} --tasks wikitext --include-path {tmp}/missing", "--include-path"),
    ("compare --status --out {tmp}/cmp --data {tmp}", "--data / --heldout: a folder, not a file"),  # "no such file"
    ("compare --status --out {tmp}/cmp --stop-after nan", "--stop-after"),  # NaN minutes: it never stopped
    ("compare --status --out {tmp}/cmp --stop-after -1", "--stop-after"),
    ("compare --status --out {tmp}/cmp --finish-within nan", "--finish-within"),
    ("reproduce drt --status --out {tmp}/study --finish-within -3", "--finish-within"),
]
# The lm-eval adapter checks its options once the eval extra is importable; without it every lm-eval call is the
# one line naming the extra (CASES above), so these run where CI installs the extra.
_NEEDS_LM_EVAL = pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None,
                                    reason="the eval extra (lm-eval) is not installed")
NAMED = [pytest.param(*case, marks=_NEEDS_LM_EVAL) if case[0].startswith("lm-eval") else case for case in NAMED]


def run_cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    code = main(argv)
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize("template", CASES)
def test_a_bad_input_is_one_line_and_a_failure(template, runs, capsys):
    import shlex

    argv = shlex.split(template.format(**runs))
    code, err = run_cli(argv, capsys)
    assert code != 0, f"{template}: exit status 0 (stderr {err})"
    errors = [line for line in err if line.startswith("looped: error:")]
    assert len(errors) == 1 and not any("Traceback" in line for line in err), err
    assert all(line.startswith("looped: ") for line in err), err  # notes allowed, nothing else


@pytest.mark.parametrize("template, named", NAMED)
def test_a_bad_input_is_named_in_its_one_line(template, named, runs, capsys):
    import shlex

    code, err = run_cli(shlex.split(template.format(**runs)), capsys)
    assert code != 0 and len(err) == 1 and named in err[0], err
    assert ".tmp-" not in err[0], err  # never a temporary file of ours


@pytest.mark.parametrize("extra", [["--sample-bytes", "-1"], ["--prompt", ""], ["--record", "/proc/looped/x.json"]])
def test_the_quickstart_refuses_a_bad_sample_or_record_before_training(extra, tmp_path, capsys):
    """These used to fail only after the quickstart's minutes of training (or silently at the end)."""
    out = tmp_path / "qs"
    code, err = run_cli(["quickstart", "--out", str(out), "--set", "train.max_steps=1", *extra], capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("looped: error:"), err
    assert not out.exists(), "training started before the bad option was refused"


def test_every_error_class_of_the_library_is_a_one_line_error():
    """The boundary is a list of classes (cli/common.py): a new error class of looped that is not on it would be
    a traceback again. Every Exception subclass defined in looped's modules must be covered."""
    import importlib
    import pkgutil

    import looped
    from looped.cli.common import user_error_types

    classes = set()
    for info in pkgutil.walk_packages(looped.__path__, "looped."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed (its import error is itself one line)
            continue
        classes |= {obj for obj in vars(module).values() if isinstance(obj, type) and issubclass(obj, Exception)
                    and obj.__module__ == info.name}
    assert classes, "no error classes found"
    uncovered = sorted(c.__qualname__ for c in classes if not issubclass(c, user_error_types()))
    assert not uncovered, uncovered
