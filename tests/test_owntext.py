"""Training on your own text: what `looped train` prints at the end, the train / held-out data checks, and
fine-tuning from another run's weights (issue 29, "your own text")."""

import json

from helpers import tiny_run_config, write_config, write_text_corpus

from looped.cli import main
from looped.train.config import load_run_config
from looped.train.summary import COMPRESSOR_CACHE, summary_lines, worse_than_best


def test_train_ends_with_the_heldout_score_beside_the_compressors_not_a_json_dump(tmp_path, capsys):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 30_000)
    config = write_config(tmp_path / "c.yaml", tiny_run_config(corpus, train={"max_steps": 4, "eval_every": 2},
                                                              data={"block_size": 65}))
    assert main(["train", str(config), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert '"best_step"' not in out  # the raw summary dict moved to RUN/summary.json (and --json)
    assert "held-out bits/byte" in out and "at update 4 (2 evaluations" in out
    assert "gzip -9" in out and "bzip2 -9" in out and "xz -9e" in out
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["step"] == 4
    assert (tmp_path / "run" / COMPRESSOR_CACHE).is_file()


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
    assert "best checkpoint: bits/byte 2.1640 at update 20" in lines[0]
    assert "worse than the best earlier one (2.1640 at update 20)" in warning
    assert "--which best" in warning  # train.select is last: say how to score the best one
    write_curve(tmp_path / "fine", [2.0, 1.5, 1.4])
    assert summary_lines(tmp_path / "fine", config, compressors=False)[1] is None
    assert worse_than_best([{"step": 1, "val_loss": 1.0}]) is None  # one evaluation: nothing to compare
