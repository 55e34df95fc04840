"""`looped compare` (issue 30 part 5): equal parameters, the FLOP-matched plain row, resuming, the verdicts, the
data checks before training and one-line errors."""

import csv
import json
import math
import sys
from pathlib import Path

import pytest
from helpers import write_text_corpus

from looped.cli import main
from looped.experiments import compare, compare_plan
from looped.experiments import study as runner
from looped.experiments.compare import CompareStudy, run_compare
from looped.experiments.compare_plan import (ARCHS, FIELD_ARCHS, FLOPS_ROW, PARAM_TOLERANCE, CompareOptions, Timing,
                                             cost_model, load_or_make_plan, row_steps, run_config, solve_widths,
                                             steps_for_minutes)
from looped.experiments.compare_report import summarize, table_markdown, verdicts
from looped.models import get_arch
from looped.models.budget import count_parameters
from looped.train import Trainer

TINY = dict(params=100_000, context=32, batch_size=4, heldout_bytes=1024, steps=4, seeds=1, threads=1)


def tiny_options(corpus, **changes) -> CompareOptions:
    fields = {**TINY, "archs": ["transformer", "workspace"],
              "data": {"corpus": "raw", "path": str(corpus), "heldout_fraction": 0.05}, **changes}
    options = CompareOptions(**fields)
    options.validate()
    return options


@pytest.mark.parametrize("params", [100_000, 1_000_000])
def test_every_row_has_the_plain_rows_parameter_count_within_tolerance(params):
    options = CompareOptions(**{**TINY, "params": params, "archs": list(ARCHS)})  # seed 000's rows and the field's
    widths = solve_widths(options)
    plain = widths["transformer"]["parameters"]
    assert abs(plain - params) <= PARAM_TOLERANCE * params
    for arch, section in widths.items():
        fields = {k: v for k, v in section.items() if k not in ("arch", "parameters")}
        config = get_arch(arch).config(**fields)
        assert config.vocab_size == 257, arch  # the bytes: RLT's default vocabulary is its task alphabet
        built = count_parameters(arch, **fields)  # what the run will really hold
        assert built == section["parameters"]
        assert abs(built - plain) <= PARAM_TOLERANCE * params, arch
    assert widths["shared_loop"]["dim"] == 2 * widths["transformer"]["dim"]  # seed 000's width ratios
    assert widths["mixture_of_recursions"]["recursions"] == widths["prelude_coda"]["rounds"] == options.rounds


def test_the_fields_families_compare_and_only_rows_with_a_test_time_depth_are_swept(tmp_path):
    # compare trained seed 000's rows only, and its depth sweep read `config.rounds`, which MoR (recursions) and
    # RLT-1 (no test-time depth) do not have
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    out = tmp_path / "out"
    plan = load_or_make_plan(out, tiny_options(corpus, archs=["transformer", *FIELD_ARCHS], steps=2, rounds=2,
                                               match=["params"]), log=lambda m: None)
    run_compare(out, tmp_path / "runs", plan, progress=False, log=lambda m: None)
    results = {r["row"]: r for r in csv.DictReader(open(out / "results.csv"))}
    assert sorted(results) == sorted(["transformer", *FIELD_ARCHS])
    swept = {}
    for r in csv.DictReader(open(out / "depth.csv")):
        swept.setdefault(r["row"], []).append(int(r["rounds"]))
    looped = [a for a in FIELD_ARCHS if a != "rlt"]
    assert {row: sorted(rounds) for row, rounds in swept.items()} == {row: [1, 2, 3, 4] for row in looped}
    assert results["rlt"]["best_depth"] == results["transformer"]["best_depth"] == ""
    assert all(int(results[row]["best_depth"]) in (1, 2, 3, 4) for row in looped)
    table = (out / "table.md").read_text()
    assert all(f"| {row} |" in table for row in FIELD_ARCHS)
    assert (out / "depth.png").stat().st_size > 0


def test_the_held_out_curve_holds_only_evaluations_when_training_logs_between_them(tmp_path, monkeypatch):
    """The engine once added every run's training-loss log to compare's curves.csv (both were `study.curves`):
    where a run logs between its evaluations (a FLOP-matched row of >= 200 updates), those rows had no FLOPs and
    no bits/byte, and the report's curves.png died on them in one line (`could not convert string to float`)."""
    monkeypatch.setattr(compare_plan, "CURVE_POINTS", 2)  # 4 updates: evaluated every 2, logged every 1
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    out = tmp_path / "out"
    plan = load_or_make_plan(out, tiny_options(corpus, archs=["transformer", "shared_loop"], match=["params"]),
                             log=lambda m: None)
    run_compare(out, tmp_path / "runs", plan, progress=False, log=lambda m: None)
    curve = list(csv.DictReader(open(out / "curves.csv")))
    assert sorted((r["row"], int(r["step"])) for r in curve) == [(row, step) for row in ("shared_loop", "transformer")
                                                                 for step in (2, 4)]
    assert all(float(r["flops"]) > 0 and float(r["bits_per_byte"]) > 0 for r in curve)
    assert (out / "curves.png").stat().st_size > 0


def test_flops_matching_gives_the_plain_row_the_looped_rows_training_flops(tmp_path):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    plan = load_or_make_plan(tmp_path / "out", tiny_options(corpus, archs=["transformer", "shared_loop", "workspace"]),
                             log=lambda m: None)
    looped_flops = max(plan["steps"] * plan["update_flops"][a] for a in ("shared_loop", "workspace"))
    assert plan["flops_target"] == looped_flops
    extra = row_steps(plan, FLOPS_ROW)
    assert extra > plan["steps"]
    assert extra * plan["update_flops"]["transformer"] <= looped_flops < (extra + 1) * plan["update_flops"]["transformer"]
    flops_run, plain_run = run_config(plan, FLOPS_ROW, 11), run_config(plan, "transformer", 11)
    assert flops_run.train.max_flops == looped_flops and flops_run.train.max_steps is None
    assert flops_run.train.eval_every == max(1, extra // 20)  # its own ~20 evaluations
    for row in ("transformer", "workspace", FLOPS_ROW):  # one data order for every row
        data = run_config(plan, row, 23).data
        assert (data.sampler, data.data_seed) == ("independent", 0)
    assert plain_run.train.select == "best" and plain_run.train.eval_batches == 0


def test_a_killed_compare_resumes_and_finished_rows_are_not_trained_again(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "write_report", lambda out, plan: [])  # the report has its own test
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    out, runs = tmp_path / "out", tmp_path / "runs"
    plan = load_or_make_plan(out, tiny_options(corpus), log=lambda m: None)
    study = CompareStudy(out, runs, plan, log=lambda m: None)
    killed = {"row": "workspace", "seed": 11}
    Trainer(study.config(killed), study.folder(killed), progress=False, log=lambda m: None).run(stop_after=2)

    messages = []
    run_compare(out, runs, plan, progress=False, log=messages.append)
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert sorted(r["row"] for r in rows) == sorted(["transformer", "workspace", FLOPS_ROW])
    events = [json.loads(line) for line in open(study.folder(killed) / "metrics.jsonl")]
    assert [e["step"] for e in events if "loss" in e].count(1) == 1  # resumed at update 2, not started over
    assert {r["row"]: int(r["updates"]) for r in rows}["workspace"] == 4

    def no_training(*args, **kwargs):
        raise AssertionError("a finished row was trained again")

    monkeypatch.setattr(runner, "Trainer", no_training)
    run_compare(out, runs, plan, progress=False, log=messages.append)
    assert list(csv.DictReader(open(out / "results.csv"))) == rows


def synthetic_results(path, bits: dict[str, list[float]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=compare.COLUMNS)
        writer.writeheader()
        for row, values in bits.items():
            for seed, value in zip((11, 23, 37), values):
                writer.writerow({"row": row, "arch": row.split("@")[0], "seed": seed, "parameters": 1000,
                                 "updates": 300 if row == FLOPS_ROW else 100, "train_flops": 1e12,
                                 "bits_per_byte": value, "best_step": 100, "best_depth": "" if "transformer" in row
                                 else 6, "inference_flops_per_token": 2e6, "decode_tokens_per_s": 500,
                                 "state_bytes_1024": 4096, "status": "ok"})


def test_the_verdicts_give_the_difference_of_means_and_its_standard_error(tmp_path):
    synthetic_results(tmp_path / "results.csv", {"transformer": [2.00, 2.02, 2.04], "workspace": [1.98, 1.99, 2.00],
                                                 FLOPS_ROW: [1.95, 1.96, 1.97]})
    options = CompareOptions(archs=["transformer", "workspace"])
    summary = summarize(list(csv.DictReader(open(tmp_path / "results.csv"))), options.rows)
    lines = verdicts(summary, options.match)
    # se = sqrt(0.02^2/3 + 0.01^2/3) = 0.0129: the gain is beyond 2 standard errors
    assert lines[0] == ("workspace − plain at equal params: −0.030 ± 0.013 bits/byte, 3 seeds; "
                        "workspace is better (beyond 2 standard errors)")
    assert lines[1] == ("workspace − plain with 300 updates at equal training FLOPs: +0.030 ± 0.008 bits/byte, "
                        "3 seeds; workspace is worse (beyond 2 standard errors)")
    table = table_markdown(summary, {"rates": {"xz -9e": 2.3}}, options, lines)
    assert "| workspace | 1,000 | 100 | 1 T | 1.9900 ± 0.0100 (n=3) | 6 (trained 4) |" in table
    assert "| xz -9e (floor) | | | | 2.3000 |" in table


def test_one_seed_gives_a_verdict_without_an_sd(tmp_path):
    synthetic_results(tmp_path / "results.csv", {"transformer": [2.0], "workspace": [1.9]})
    options = CompareOptions(archs=["transformer", "workspace"], match=["params"])
    summary = summarize(list(csv.DictReader(open(tmp_path / "results.csv"))), options.rows)
    assert verdicts(summary, options.match) == ["workspace − plain at equal params: −0.100 bits/byte, 1 seed "
                                                "(no SD from one seed)"]


def test_minutes_size_the_updates_from_the_measured_times():
    options = CompareOptions(archs=["transformer", "workspace"], seeds=2, minutes=10, heldout_bytes=129 * 32)
    timings = {"transformer": Timing(0.1, 0.01), "workspace": Timing(0.3, 0.03)}
    per_step, fixed = cost_model(options, timings, flops_ratio=3.0)
    assert per_step == pytest.approx(2 * (0.1 + 0.3 + 3 * 0.1))  # the FLOP-matched row trains 3x the updates
    assert steps_for_minutes(options, timings, 3.0) == math.floor((600 - fixed) / per_step)
    with pytest.raises(ValueError, match="--minutes 0.1: too short"):
        steps_for_minutes(CompareOptions(archs=["transformer", "workspace"], minutes=0.1), timings, 3.0)


def test_data_check_warnings_come_before_any_training(tmp_path, capsys, monkeypatch):
    from looped.experiments import compare_plan

    train = write_text_corpus(tmp_path / "train.txt", 20_000)
    heldout = tmp_path / "heldout.txt"
    heldout.write_bytes(write_text_corpus(tmp_path / "h.txt", 4_000, seed=1).read_bytes().replace(b"\n", b"\r\n"))

    def stop_at_planning(*args, **kwargs):  # planning is the first step that times or trains anything
        print("PLANNED", file=sys.stderr)
        raise KeyboardInterrupt

    monkeypatch.setattr(compare_plan, "load_or_make_plan", stop_at_planning)
    args = ["compare", "--data", str(train), "--heldout", str(heldout), "--out", str(tmp_path / "out"),
            "--archs", "transformer", "workspace", "--params", "100k", "--steps", "2"]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert err.index("looped: warning: line endings differ: train LF, held-out CRLF") < err.index("PLANNED")

    assert main([*args, "--strict"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("looped: error: --strict: the data checks found 1 mismatch(es)")
    assert "PLANNED" not in "\n".join(err)


@pytest.mark.parametrize("options, message", [
    (["--archs", "shared_loop", "workspace"], "--archs: the plain row 'transformer' must be one of them"),
    (["--archs", "transformer", "lstm"], "--archs: 'lstm' is not a byte-level row compare trains"),
    (["--params", "lots"], "--params: 'lots' is not a count"),
    (["--match", "speed"], "--match: choose from params, flops"),
    (["--steps", "5", "--minutes", "3"], "--steps / --minutes: give one budget"),
    (["--heldout", "h.txt"], "--heldout: give the training text too"),
    (["--data", "missing.txt"], "--data / --heldout: no such file: missing.txt"),
    (["--seeds", "0"], "--seeds: must be at least 1"),
])
def test_bad_options_end_in_one_line(tmp_path, capsys, options, message):
    assert main(["compare", "--out", str(tmp_path / "out"), *options]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"looped: error: {message}")
    assert not (tmp_path / "out" / "plan.json").exists()


def test_resuming_with_other_options_is_refused_in_one_line_but_more_seeds_are_added(tmp_path):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 20_000)
    first = load_or_make_plan(tmp_path / "out", tiny_options(corpus), log=lambda m: None)
    with pytest.raises(ValueError, match=r"holds a comparison with other options \(heldout_bytes: 1024 there, 2048 now\)"):
        load_or_make_plan(tmp_path / "out", tiny_options(corpus, heldout_bytes=2048), log=lambda m: None)
    with pytest.raises(ValueError, match="holds a comparison of 4 updates per run"):
        load_or_make_plan(tmp_path / "out", tiny_options(corpus, steps=9), log=lambda m: None)
    more = load_or_make_plan(tmp_path / "out", tiny_options(corpus, seeds=2, steps=None, minutes=5),
                             log=lambda m: None)
    assert more["steps"] == first["steps"] == 4  # the runs of the new seed get the budget of the first ones
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["options"]["seeds"] == 2


def test_compare_plots_name_their_data_and_size_and_print_readable_flops(monkeypatch):
    # the committed plots said neither the data nor the size, printed '1e13' in a corner instead of tick values,
    # and wrote 'gzip -9' and 'xz -9e' over each other where their rates were 0.1 bits apart
    from looped.experiments import compare_plots

    kept = {}

    def keep(fig, path):
        ax = fig.axes[0]
        fig.canvas.draw()
        kept[path.name] = {"title": ax.get_title(), "offset": ax.xaxis.get_offset_text().get_text(),
                           "ticks": [t.get_text() for t in ax.get_xticklabels() if t.get_text()],
                           "legend": [t.get_text() for t in ax.get_legend().get_texts()], "texts": list(ax.texts)}

    monkeypatch.setattr(compare_plots, "atomic_save_figure", keep)
    plan = {"options": {"data": {"corpus": "kjv"}, "seeds": 2, "context": 128}}
    summary = [{"row": "transformer", "parameters": 999936, "inference_flops_per_token": 2.2e6,
                "bits_per_byte_mean": 3.2},
               {"row": "workspace", "parameters": 1000022, "inference_flops_per_token": 8.1e6,
                "bits_per_byte_mean": 2.9}]
    curves = [{"row": row, "step": step, "flops": step * scale, "bits_per_byte": 4 - step / 100}
              for row, scale in (("transformer", 1e10), ("workspace", 4e10)) for step in (10, 100, 200, 300)]
    floor = {"rates": {"gzip -9": 2.68, "xz -9e": 2.59}}
    compare_plots.plot_curves(Path("curves.png"), ["transformer", "workspace"], curves, floor, plan, summary)
    compare_plots.plot_pareto(Path("pareto.png"), plan, ["transformer", "workspace"], summary, [])
    for name, seen in kept.items():
        assert "kjv, 999,936–1,000,022 parameters, mean over 2 seed(s)" in seen["title"], name
        assert seen["offset"] == "" and all(t == "0" or t[-2:] in (" G", " T", " M") for t in seen["ticks"]), (name, seen["ticks"])
    assert kept["curves.png"]["texts"] == []  # the compressors are named in the legend, not on the axis
    assert {"gzip -9 (2.68)", "xz -9e (2.59)"} <= set(kept["curves.png"]["legend"])
