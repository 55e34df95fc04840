"""`looped plot`: training curves of several runs side by side, with a text summary and one-line errors."""

import json

import pytest

from looped.cli import main
from looped.eval.curves import CurveError, plot_runs, series
from looped.io import MetricsError


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
    with pytest.raises(MetricsError, match="metrics.jsonl: line 2 is not a metrics event"):  # the trainer's reader
        plot_runs([tmp_path / "bad"], tmp_path / "y.png")
    # a torn last line (a live run mid-write, or a kill) is skipped with a note, not an error
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "metrics.jsonl").write_text('{"step": 1, "loss": 2}\n{"step": 2, "loss": 1}\n{"st')
    plot_runs([tmp_path / "torn"], tmp_path / "z.png")
    assert "looped: note: " in (err := capsys.readouterr().err) and "dropped a torn last line" in err


def write_config(folder, **task):
    """A run folder's config.yaml, as the trainer writes it (only what the title reads)."""
    import yaml

    config = {"model": {"arch": "transformer", "dim": 32, "heads": 4, "layers": 2, "ffn_dim": 64},
              "data": {"corpus": "raw", "path": "/somewhere/novel.txt"}}
    if task:
        config["task"] = task
    (folder / "config.yaml").write_text(yaml.safe_dump(config))


def test_panels_name_their_units_and_the_title_names_the_run(tmp_path):
    from looped.eval.curves import curves_figure

    run = write_run(tmp_path / "r", [3.0, 2.5, 2.0], [(10_000, 2.4), (20_000, 1.9)])
    write_config(run)
    fig, _ = curves_figure([run])
    by_title = {ax.get_title(): ax for ax in fig.axes}
    assert by_title["loss"].get_ylabel() == "training loss (nats/target)"
    assert by_title["val_loss"].get_ylabel() == "held-out loss (nats/target)"
    assert by_title["val_bits_per_byte"].get_ylabel() == "held-out bits/byte"
    assert by_title["val_bits_per_byte"].get_xlabel() == "optimizer update"
    assert by_title["val_bits_per_byte"].xaxis.get_major_formatter()(12_000, 0) == "12,000"
    (line,) = by_title["val_bits_per_byte"].lines
    assert list(line.get_xdata()) == [10_000, 20_000]  # a line through both evaluations
    title = fig._suptitle.get_text()
    assert title.startswith("transformer, ") and " parameters, raw (novel.txt)" in title


def test_a_single_evaluation_is_a_table_row_not_a_lonely_dot(tmp_path):
    from looped.eval.curves import curves_figure

    run = write_run(tmp_path / "r", [3.0, 2.5], [(20, 2.4)])
    fig, _ = curves_figure([run], metrics=["val_bits_per_byte"])
    (ax,) = fig.axes
    assert not ax.lines and len(ax.tables) == 1
    cells = ax.tables[0].get_celld()
    assert cells[(0, 1)].get_text().get_text() == "held-out bits/byte"
    assert cells[(1, 1)].get_text().get_text() == f"{2.4 / 0.6931:.4f}"


def test_accuracy_panels_span_0_to_1_with_the_chance_line(tmp_path):
    from looped.eval.curves import curves_figure

    run = write_run(tmp_path / "r", [1.0, 0.5], [(10, 0.47), (20, 0.45)], accuracy_key="val_accuracy")
    write_config(run, kind="sequence", name="parity")
    fig, _ = curves_figure([run], metrics=["val_accuracy"])
    (ax,) = fig.axes
    assert ax.get_ylim() == (0.0, 1.0) and ax.get_ylabel() == "held-out accuracy (fraction)"
    chance = [line for line in ax.lines if line.get_label().startswith("chance")]
    assert len(chance) == 1 and list(chance[0].get_ydata()) == [0.5, 0.5]


def test_a_comparison_is_written_to_the_current_directory(tmp_path, monkeypatch, capsys):
    a = write_run(tmp_path / "a", [3.0, 2.5], [(10, 2.4), (20, 2.2)])
    b = write_run(tmp_path / "b", [3.1, 2.6], [(10, 2.5), (20, 2.3)])
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert main(["plot", str(a), str(b)]) == 0
    assert (tmp_path / "here" / "curves.png").is_file() and not (a / "curves.png").exists()
    assert "wrote curves.png" in capsys.readouterr().out


def test_a_comparison_title_names_each_run(tmp_path):
    from looped.eval.curves import curves_figure

    a = write_run(tmp_path / "a", [3.0, 2.5], [(10, 2.4), (20, 2.2)])
    b = write_run(tmp_path / "b", [3.1, 2.6], [(10, 2.5), (20, 2.3)])
    write_config(a)
    write_config(b, kind="sequence", name="parity")
    lines = curves_figure([a, b])[0]._suptitle.get_text().splitlines()
    assert lines[0].startswith("a: transformer, ") and lines[0].endswith("raw (novel.txt)")
    assert lines[1].startswith("b: transformer, ") and lines[1].endswith("task parity")


def test_an_addition_run_is_plotted_by_its_headline_not_its_always_right_final_state(tmp_path):
    """Addition's final "state" is the EOS, right from the first updates: plotting it by default would show a flat
    100 % curve for a model that cannot add."""
    from looped.eval.curves import curves_figure

    run = tmp_path / "add"
    run.mkdir()
    lines = [{"step": 10, "loss": 2.0}, {"step": 20, "loss": 1.5},
             {"step": 20, "val_loss": 1.6, "val_final_state_accuracy": 1.0, "val_prefix_token_accuracy": 0.3}]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    write_config(run, kind="sequence", name="addition")
    _, summary = curves_figure([run])
    assert "val_prefix_token_accuracy" in summary and "val_final_state_accuracy" not in summary
