"""`looped plot`: training curves of several runs side by side, with a text summary and one-line errors."""

import json

import pytest

from looped.cli import main
from looped.eval.curves import CurveError, plot_runs, series


def write_run(folder, losses, val, accuracy_key=None):
    folder.mkdir(parents=True)
    lines = [{"step": 10 * (i + 1), "loss": loss, "targets": 400 * (i + 1)} for i, loss in enumerate(losses)]
    for step, value in val:
        entry = {"step": step, "val_loss": value, "val_bits_per_byte": value / 0.6931}
        if accuracy_key:
            entry[accuracy_key] = 1 - value
        lines.append(entry)
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return folder


def test_two_runs_make_a_figure_and_a_summary(tmp_path, capsys):
    a = write_run(tmp_path / "a" / "seed11", [3.0, 2.5, 2.0, 1.8], [(20, 2.4), (40, 1.9)])
    b = write_run(tmp_path / "b" / "seed11", [3.1, 2.9, 2.7, 2.6], [(20, 2.8), (40, 2.6)])
    assert main(["plot", str(a), str(b), "--out", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "c.png").stat().st_size > 1000
    # same folder names -> parent/name labels; default metrics: loss, val_loss, the headline score
    assert "a/seed11" in out and "b/seed11" in out
    line = next(l for l in out.splitlines() if l.startswith("b/seed11") and " val_loss " in l)
    assert "last 2.6 @ step 40" in line and "best 2.6" in line
    assert sum(" val_bits_per_byte " in l for l in out.splitlines()) == 2
    assert main(["plot", str(a)]) == 0 and (a / "curves.png").exists()  # default output path


def test_targets_axis_and_accuracy_is_best_when_highest(tmp_path):
    run = write_run(tmp_path / "r", [1.0, 0.5], [(10, 0.7), (20, 0.4)], accuracy_key="val_accuracy")
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert series(lines, "val_loss", "targets") == ([400.0, 800.0], [0.7, 0.4])
    summary = plot_runs([run], tmp_path / "x.png", metrics=["val_accuracy"])
    assert "best 0.6" in summary  # accuracy: the maximum, not the minimum


def test_smoothing_is_debiased():
    from looped.eval.curves import ema

    assert ema([5.0, 5.0, 5.0], 0.9) == pytest.approx([5.0, 5.0, 5.0])  # no drift towards the zero start
    smoothed = ema([4.0, 2.0], 0.5)
    assert smoothed[0] == pytest.approx(4.0) and smoothed[1] == pytest.approx((0.5 * 2.0 + 0.25 * 4.0) / 0.75)


def test_bad_input_is_one_line(tmp_path, capsys):
    run = write_run(tmp_path / "r", [1.0], [(10, 0.7)])
    for argv, needle in ((["plot", str(tmp_path / "nope")], "no metrics.jsonl"),
                         (["plot", str(run), "--metrics", "val_acc"], "no metric 'val_acc' (it has:"),
                         (["plot", str(run), "--smooth", "1.5"], "--smooth must be in [0, 1)"),
                         (["plot", str(run), "--labels", "x", "y"], "2 labels for 1 runs")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.jsonl").write_text('{"step": 1, "loss": 2}\nnot json\n{"step": 2, "loss": 1}\n')
    with pytest.raises(CurveError, match="metrics.jsonl:2: not a JSON line"):
        plot_runs([tmp_path / "bad"], tmp_path / "y.png")
    # a torn last line (a live run mid-write, or a kill) is skipped with a note, not an error
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "metrics.jsonl").write_text('{"step": 1, "loss": 2}\n{"step": 2, "loss": 1}\n{"st')
    plot_runs([tmp_path / "torn"], tmp_path / "z.png")
    assert "skipped a torn last line" in capsys.readouterr().err
