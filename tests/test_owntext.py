"""Training on your own text: what `looped train` prints at the end, the train / held-out data checks, and
fine-tuning from another run's weights (issue 29, "your own text")."""

import json
import tempfile
from pathlib import Path

from helpers import tiny_run_config, trainer_at_update_zero, write_config, write_text_corpus

from looped.cli import main
from looped.data.checks import BOM, check_histograms, check_overlap, check_split, content_lines
from looped.train.config import load_run_config
from looped.train.summary import COMPRESSOR_CACHE, summary_lines, worse_than_best


def test_train_ends_with_the_heldout_score_beside_the_compressors_not_a_json_dump(tmp_path, capsys):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 30_000)
    config = write_config(tmp_path / "c.yaml", tiny_run_config(corpus, train={"max_steps": 4, "eval_every": 2},
                                                              data={"block_size": 65}))
    assert main(["train", str(config), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert '"best_step"' not in out  # the raw summary dict moved to RUN/summary.json (and --json)
    assert "held-out bits/byte" in out and "at update 4 on the first 32 held-out sequences (2 evaluations" in out
    assert "gzip -9" in out and "bzip2 -9" in out and "xz -9e" in out
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["step"] == 4
    assert (tmp_path / "run" / COMPRESSOR_CACHE).is_file()


def test_compressors_rate_a_long_heldout_text_by_its_start(tmp_path, monkeypatch):
    from looped.train import summary

    corpus = write_text_corpus(tmp_path / "corpus.txt", 30_000)  # 3,000 held-out bytes
    config = load_run_config(write_config(tmp_path / "c.yaml", tiny_run_config(corpus, data={"block_size": 65})))
    write_curve(tmp_path / "run", [2.0, 1.5])
    monkeypatch.setattr(summary, "COMPRESSOR_MAX_BYTES", 1_000)
    lines, _ = summary.summary_lines(tmp_path / "run", config)
    assert "the held-out text (its first 1,000 of 3,000 bytes) compressed: gzip -9" in lines[1]
    assert json.loads((tmp_path / "run" / COMPRESSOR_CACHE).read_text())["bytes"] == 1_000


def test_train_json_flag_keeps_the_machine_readable_summary(tmp_path, capsys):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 30_000)
    config = write_config(tmp_path / "c.yaml", tiny_run_config(corpus, train={"max_steps": 2, "eval_every": 0},
                                                              data={"block_size": 65}))
    assert main(["train", str(config), "--out", str(tmp_path / "run"), "--no-progress", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("\n{") + 1:])["step"] == 2


def write_curve(run, losses):
    run.mkdir()
    lines = [json.dumps({"step": 10 * (i + 1), "val_loss": loss, "val_bits_per_byte": loss / 0.6931471805599453})
             for i, loss in enumerate(losses)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_a_final_score_worse_than_an_earlier_one_is_a_warning(tmp_path):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 3_000)
    config = load_run_config(write_config(tmp_path / "c.yaml", tiny_run_config(corpus, data={"block_size": 65})))
    write_curve(tmp_path / "over", [2.0, 1.5, 1.7])
    lines, warning = summary_lines(tmp_path / "over", config, compressors=False)
    assert "; best bits/byte 2.1640 at update 20)" in lines[0]
    assert "worse than the best earlier one (2.1640 at update 20)" in warning
    assert "--which best" in warning  # train.select is last: say how to score the best one
    write_curve(tmp_path / "fine", [2.0, 1.5, 1.4])
    assert summary_lines(tmp_path / "fine", config, compressors=False)[1] is None
    config.train.select = "best"
    assert "checkpoints/best keeps update 20" in summary_lines(tmp_path / "over", config, compressors=False)[1]
    assert worse_than_best([{"step": 1, "val_loss": 1.0}]) is None  # one evaluation: nothing to compare


def english(n_bytes: int, seed: int) -> bytes:
    return write_text_corpus(Path(tempfile.mkdtemp()) / "t.txt", n_bytes, seed).read_bytes()


def test_matching_train_and_heldout_texts_have_no_findings():
    assert check_split(english(20_000, 0), english(5_000, 1)) == []


def test_crlf_against_lf_and_a_bom_on_one_side_are_findings():
    train, heldout = english(20_000, 0), BOM + english(5_000, 1).replace(b"\n", b"\r\n")
    findings = {f.kind: f for f in check_split(train, heldout, train_files=[train], heldout_files=[heldout])}
    assert set(findings) == {"line_endings", "bom"}
    assert "train LF, held-out CRLF" in findings["line_endings"].message
    assert findings["bom"].details["files_with_bom"] == {"train": 0, "heldout": 1}


def test_a_different_kind_of_text_is_a_byte_histogram_finding_naming_the_bytes():
    digits = "".join(f"{i * 7919 % 100000:05d} {i % 13}\n" for i in range(2_000)).encode()
    distance, finding = check_histograms(english(20_000, 0), digits)
    assert distance > 0.5 and finding is not None
    top = finding.details["top_bytes"][0]  # a digit: common in the held-out table, absent from the prose
    assert top["byte"] in [repr(d) for d in "0123456789"] and top["train"] == 0.0 and top["heldout"] > 0.05
    assert "total-variation distance" in finding.message


def test_heldout_lines_repeated_from_training_are_an_overlap_finding():
    train, heldout = english(20_000, 0), english(5_000, 1)
    leaked = heldout + b"\n" + b"\r\n".join(content_lines(train)[:40])  # other line endings hide no overlap
    share, finding = check_overlap(train, leaked)
    assert finding is not None and finding.details["lines"] == 40 and share > 0.25
    assert check_overlap(train, heldout)[1] is None


def test_data_info_reports_the_findings(tmp_path, capsys):
    (tmp_path / "train.txt").write_bytes(english(20_000, 0))
    (tmp_path / "heldout.txt").write_bytes(english(5_000, 1).replace(b"\n", b"\r\n"))
    config = tiny_run_config(tmp_path / "unused.txt", data={"block_size": 65, "path": None,
                                                            "train_paths": [str(tmp_path / "train.txt")],
                                                            "heldout_paths": [str(tmp_path / "heldout.txt")]})
    assert main(["data", "info", str(write_config(tmp_path / "c.yaml", config))]) == 0
    out = capsys.readouterr()
    assert [f["kind"] for f in json.loads(out.out)["findings"]] == ["line_endings"]
    assert out.err.startswith("looped: warning: line endings differ: train LF, held-out CRLF")


def fine_tune_config(tmp_path, source, **model):
    corpus = write_text_corpus(tmp_path / "new_text.txt", 20_000, seed=3)
    return tiny_run_config(corpus, data={"block_size": 65},
                           model=model, train={"max_steps": 2, "eval_every": 0, "init_from": str(source)})


def test_init_from_starts_a_new_run_from_another_runs_weights(tmp_path):
    from safetensors.torch import load_file

    from looped.config import from_dict
    from looped.train import RunConfig, Trainer

    corpus = write_text_corpus(tmp_path / "corpus.txt", 30_000)
    source = tmp_path / "source"
    Trainer(from_dict(RunConfig, tiny_run_config(corpus, data={"block_size": 65}, train={"max_steps": 3})), source,
            progress=False, log=lambda m: None).run()
    config = from_dict(RunConfig, fine_tune_config(tmp_path, source))
    trainer = trainer_at_update_zero(config, tmp_path / "tuned")
    saved = load_file(str(source / "checkpoints" / "last" / "model.safetensors"))
    ours = trainer.model.state_dict()
    assert saved and all(ours[name].equal(tensor) for name, tensor in saved.items())
    assert trainer.step == 0 and not trainer.optimizer.state  # a new run: fresh step and optimizer
    recorded = load_run_config(tmp_path / "tuned" / "config.yaml")
    assert recorded.train.init_from == str(source)


def test_init_from_another_architecture_is_one_line_naming_the_keys(tmp_path, capsys):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 30_000)
    source_config = write_config(tmp_path / "s.yaml", tiny_run_config(corpus, data={"block_size": 65},
                                                                      train={"max_steps": 1, "eval_every": 0}))
    assert main(["train", str(source_config), "--out", str(tmp_path / "source"), "--no-progress"]) == 0
    capsys.readouterr()
    config = write_config(tmp_path / "t.yaml", fine_tune_config(tmp_path, tmp_path / "source", dim=64, ffn_dim=96))
    assert main(["train", str(config), "--out", str(tmp_path / "tuned"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("looped: error: train.init_from:")
    assert "model.dim (32 there, 64 here)" in err and "model.ffn_dim (64 there, 96 here)" in err


def config_classes() -> list[type]:
    """Every dataclass a run config is built from: the sections, each task kind's and each architecture's."""
    from looped.data import DataConfig
    from looped.models import arch_names, get_arch
    from looped.train import tasks
    from looped.train.config import OptimConfig, RunConfig, TrainConfig
    from looped.train.tracking import WandbConfig

    tasks._load_builtin()
    kinds = [config_cls for config_cls, _ in tasks._KINDS.values()]
    classes = [RunConfig, DataConfig, OptimConfig, TrainConfig, WandbConfig, *kinds,
               *dict.fromkeys(get_arch(name).config_cls for name in arch_names())]
    return list(dict.fromkeys(nested for cls in classes for nested in with_sections(cls)))


def with_sections(cls: type) -> list[type]:
    """`cls` and the dataclasses of its fields that are sections of their own (model.depth_schedule), recursively."""
    import dataclasses
    import typing

    sections = [tp for tp in typing.get_type_hints(cls).values() if dataclasses.is_dataclass(tp)]
    return [cls, *(inner for tp in sections for inner in with_sections(tp))]


def test_every_field_of_every_config_dataclass_has_a_meaning():
    import dataclasses

    from looped.config import meaning_of

    classes = config_classes()
    assert len(classes) > 15
    missing = [f"{cls.__name__}.{f.name}" for cls in classes for f in dataclasses.fields(cls)
               if cls.__name__ != "RunConfig" and not meaning_of(cls, f.name)]
    assert missing == []  # add a comment beside the field (or COMMON_MEANINGS for a standard hyperparameter)


def test_meanings_come_from_the_field_comments():
    from looped.config import field_meanings
    from looped.train.config import OptimConfig, TrainConfig

    assert field_meanings(OptimConfig)["min_lr"] == "cosine floor"
    assert field_meanings(TrainConfig)["init_from"].startswith("Fine-tuning: start from the weights of a run folder")


def test_config_show_explains_every_key(tmp_path, capsys):
    assert main(["config", "show", "workspace"]) == 0
    out = capsys.readouterr().out
    assert "\nmodel:\n  arch: \"workspace\"" in out and "\ntrain:\n" in out
    slots = next(line for line in out.splitlines() if line.startswith("  slots: "))
    assert "# workspace slots S" in slots
    corpus = write_text_corpus(tmp_path / "corpus.txt", 3_000)
    config = write_config(tmp_path / "c.yaml", tiny_run_config(corpus, data={"block_size": 65}))
    assert main(["config", "show", str(config), "--set", "train.eval_every=3"]) == 0
    eval_every = next(line for line in capsys.readouterr().out.splitlines() if "eval_every:" in line)
    assert eval_every.startswith("  eval_every: 3 ") and eval_every.endswith("(default: 0)")
    assert main(["config", "show", "no_such_arch"]) == 2
    assert "unknown architecture 'no_such_arch'" in capsys.readouterr().err


def test_a_task_run_reports_accuracy_and_judges_by_the_loss(tmp_path):
    from looped.train.summary import summary_lines

    config = load_run_config(base={"model": {"arch": "rlt", "dim": 32, "heads": 4, "ffn_dim": 48},
                                   "task": {"kind": "sequence", "name": "parity"}, "train": {"max_steps": 2}})
    (tmp_path / "run").mkdir()
    events = [{"step": 10, "val_loss": 0.5, "val_accuracy": 0.6}, {"step": 20, "val_loss": 0.7, "val_accuracy": 0.7}]
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    lines, warning = summary_lines(tmp_path / "run", config)
    assert lines == [f"{tmp_path / 'run'}: held-out accuracy 0.7000 at update 20 (2 evaluations; best loss "
                     f"(nats/target) 0.5000 at update 10)"]  # no compressors: not text
    assert "final held-out loss (nats/target) (0.7000 at update 20)" in warning and "looped eval" not in warning


def test_an_addition_run_ends_with_its_prefix_token_accuracy_not_the_always_right_final_state(tmp_path):
    """Addition's final "state" is the EOS (right from the first updates): the line must name the task's headline."""
    config = load_run_config(Path("configs/rlt/cpu/addition_rlt0.yaml"))
    run = tmp_path / "add"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 100, "val_loss": 1.4, "val_final_state_accuracy": 1.0,
                                                   "val_prefix_token_accuracy": 0.62}) + "\n")
    lines, _ = summary_lines(run, config, compressors=False)
    assert "held-out prefix-token accuracy 0.6200 at update 100" in lines[0], lines
