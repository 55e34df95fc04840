"""The benchmarks run end to end at a tiny shape and write well-formed JSON.

Speed is measured by the benchmarks, never asserted here: a shared test machine makes any threshold flaky.
"""

from __future__ import annotations

import argparse
import json
import math
import re

import pytest

from looped.bench import BENCHES, cli, register_cli, run_decode_bench, run_train_bench
from looped.bench.common import format_table, measure, percentile, write_json

TINY = dict(dim=16, heads=2, layers=1, ffn_dim=32)


def assert_positive_finite(value, name):
    assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, f"{name} = {value!r}"


def assert_timing(stats, name):
    for key in ("median_s", "p10_s", "p90_s"):
        assert_positive_finite(stats[key], f"{name}.{key}")
    assert stats["p10_s"] <= stats["median_s"] <= stats["p90_s"]
    assert stats["samples"] and all(s > 0 for s in stats["samples"])


def test_train_bench_writes_json(tmp_path):
    out = tmp_path / "nested" / "train.json"
    run_train_bench(**TINY, seq=16, batch=2, steps=3, warmup=1, out=out)
    data = json.loads(out.read_text())
    assert {"bench", "shape", "model", "parameters", "checks", "models", "ratio", "goal", "method",
            "environment"} <= set(data)
    assert data["parameters"]["ours"] == data["parameters"]["reference"]
    assert data["parameters"]["equal"] is True
    assert data["checks"]["reference_matches_ours"] is True
    for name in ("ours", "reference"):
        assert_timing(data["models"][name], name)
        assert_positive_finite(data["models"][name]["tokens_per_s"], f"{name}.tokens_per_s")
        assert len(data["models"][name]["samples"]) == 3
    assert_positive_finite(data["ratio"]["median_of_pairs"], "ratio.median_of_pairs")
    assert_positive_finite(data["ratio"]["of_medians"], "ratio.of_medians")
    assert data["goal"]["applies"] is False and data["goal"]["met"] is None  # not the goal's shape
    assert data["environment"]["torch"]


def test_decode_bench_writes_json(tmp_path):
    out = tmp_path / "decode.json"
    run_decode_bench(**TINY, context=40, prompt=4, stride=8, repeats=2, checkpoints=(16, 32), out=out)
    data = json.loads(out.read_text())
    assert {"bench", "shape", "incremental", "recompute", "at_context", "speedup", "equivalence", "goal",
            "method", "environment"} <= set(data)
    assert data["equivalence"]["equivalent"] is True
    assert data["equivalence"]["max_abs_diff"] <= 1e-4
    assert_timing(data["incremental"], "incremental")
    assert_timing(data["recompute"], "recompute")
    assert len(data["incremental"]["samples"]) == 40 - 4  # one per decoded position
    assert set(data["at_context"]) == {"16", "32", "40"}  # the context itself is always reported
    for length, entry in data["at_context"].items():
        for key in ("incremental_s", "recompute_s", "speedup"):
            assert_positive_finite(entry[key], f"at_context[{length}].{key}")
    assert_positive_finite(data["speedup"]["overall"], "speedup.overall")
    assert data["recompute"]["lengths"] == [8, 16, 24, 32, 40]


def test_cli_wiring(tmp_path):
    parser = argparse.ArgumentParser(prog="looped")
    register_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "decode", "--context", "24", "--out", str(tmp_path / "d.json")])
    assert args.bench == "decode" and args.context == 24 and callable(args.func)
    assert {"train", "decode", "clw", "ddp", "think", "rlt"} <= set(BENCHES)
    for name in ("think", "rlt"):  # the seed 002 / 003 benchmarks parse through the same `looped bench`
        args = parser.parse_args(["bench", name, "--out", str(tmp_path / f"{name}.json")])
        assert args.bench == name and callable(args.func)
    with pytest.raises(SystemExit):
        parser.parse_args(["bench"])  # a benchmark name is required


def test_cli_runs_decode(tmp_path, capsys):
    out = tmp_path / "d.json"
    status = cli(["decode", "--dim", "16", "--heads", "2", "--layers", "1", "--ffn-dim", "32", "--context", "24",
                  "--prompt", "4", "--stride", "8", "--repeats", "1", "--out", str(out)])
    assert status == 0  # `looped` passes the return value to sys.exit
    assert out.exists()
    assert str(out) in capsys.readouterr().out


def test_measure_and_helpers(tmp_path):
    calls = []
    stats = measure(lambda: calls.append(1), warmup=2, repeats=5)
    assert len(calls) == 7 and len(stats["samples"]) == 5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 10) == pytest.approx(1.4)
    path = write_json(tmp_path / "a" / "b.json", {"x": 1})
    assert json.loads(path.read_text()) == {"x": 1}
    assert [p.name for p in path.parent.iterdir()] == ["b.json"]  # no temporary file left behind
    table = format_table(["name", "value"], [["a", 1.23456], ["bb", 2], ["c", 15084.2]])
    assert table.splitlines()[0].startswith("name") and "1.235" in table and "15,084" in table


def test_clw_bench_runs_every_row_side_by_side():
    from looped.bench.clw import run_clw_decode_bench, run_clw_train_bench
    from looped.experiments.clw import ROWS
    train = run_clw_train_bench("small", seq=16, batch=1, steps=2, warmup=0, threads=1)
    assert set(train["rows"]) == set(ROWS)
    assert all(r["parameters"] > 900_000 and r["median_s"] > 0 for r in train["rows"].values())
    assert train["workspace_over_anchored"]["median_of_rounds"] > 0
    decode = run_clw_decode_bench(context=48, prompt=16, sample_every=16, repeats=1)
    assert set(decode["rows"]) == set(ROWS)
    assert all(r["max_logit_difference"] < 1e-4 for r in decode["rows"].values())
    side = decode["workspace_over_anchored_tokens_per_s"]
    assert side["pairs"] == 48 - 16 and side["median_of_token_pairs"] > 0 and side["goal_min"] == 0.8
    calls = side["operator_calls_per_token"]  # the workspace adds its read to every round
    assert calls["workspace"]["kernel_calls"] > calls["anchored_loop"]["kernel_calls"] > 0


def test_growth_exponent_recovers_a_power_law():
    from looped.bench.scaling import growth_exponent

    assert growth_exponent([256, 512, 1024], [3.0 * x**2 for x in (256, 512, 1024)]) == pytest.approx(2.0)
    assert growth_exponent([1, 2, 4, 8], [5.0] * 4) == pytest.approx(0.0)


def test_live_state_bytes_count_what_the_state_holds():
    import torch

    from looped.bench.scaling import live_state_bytes
    from looped.models import build_model, get_arch

    model = build_model(get_arch("transformer").tiny_config()).eval()  # 2 layers, 4 heads x 8, context 40
    state = model.init_state(1)
    with torch.no_grad():
        model.decode(torch.zeros(1, 10, dtype=torch.long), state)
    assert live_state_bytes(state) == 2 * 2 * (4 * 10 * 8) * 4  # layers x (K, V) x heads*positions*hd x fp32
    rlt = build_model(get_arch("rlt").tiny_config()).eval()  # window 3: its caches keep 2 positions
    states = {}
    for n in (10, 20):
        states[n] = rlt.init_state(1)
        with torch.no_grad():
            rlt.decode(torch.zeros(1, n, dtype=torch.long), states[n])
    growth = live_state_bytes(states[20]) - live_state_bytes(states[10])
    per_position = 2 * (1 + 1) * 32 * 4  # (encoder layer + memory group) x (K, V) x dim x fp32
    assert growth == 10 * per_position  # the windows and the feedback register do not grow


def test_scaling_bench_fits_every_curve_and_keeps_committed_results(tmp_path, monkeypatch, capsys):
    from looped.bench import scaling

    tiny = dict(dim=16, heads=2, ffn_dim=24)
    monkeypatch.setattr(scaling, "DECODE_ROWS", {
        "transformer": ("transformer", dict(tiny, layers=1)),
        "workspace": ("workspace", dict(tiny, rounds=2, slots=2, slot_dim=4)),
        "RLT-1": ("rlt", dict(tiny, encoder_layers=1, decoder_layers=1, window=3, vocab_size=257))})
    monkeypatch.setattr(scaling, "TRAIN_SHAPE", dict(tiny, seq=8, batch=2))
    monkeypatch.setattr(scaling, "TRAIN_ROWS", {"workspace": "workspace"})
    monkeypatch.chdir(tmp_path)
    committed = tmp_path / scaling.DEFAULT_OUT
    committed.parent.mkdir(parents=True)
    committed.write_text("{}")
    assert cli(["scaling", "--contexts", "8", "16"]) == 2
    assert committed.read_text() == "{}"
    assert cli(["scaling", "--contexts", "8", "16", "--rounds", "1", "2", "--steps", "2", "--pairs", "1",
                "--out", "fresh.json"]) == 0
    data = json.loads((tmp_path / "fresh.json").read_text())
    assert (tmp_path / "fresh.png").stat().st_size > 0
    curves = data["decode"]["curves"]
    assert set(curves) == {"transformer", "workspace", "RLT-1"}
    for curve in curves.values():
        assert list(curve["state_bytes"]) == ["8", "16"]
        assert curve["state_bytes"]["16"] > curve["state_bytes"]["8"]
        assert math.isfinite(curve["time_exponent"]) and math.isfinite(curve["memory_exponent"])
    assert curves["transformer"]["memory_exponent"] == pytest.approx(1.0)  # a KV cache: linear in context
    assert list(data["train"]["curves"]["workspace"]["step_s"]) == ["1", "2"]
    assert "exponent" in capsys.readouterr().out


def test_rlt_bench_names_each_ratio_by_its_rows_and_goal():
    """`looped bench rlt --compile`: each headline ratio divides the rows its name says, round by round, and
    carries the issue's goal for its kind (RLT-1 <= 2.0, chunk 4 <= 1.3)."""
    from looped.bench.rlt import goal_of, headline_ratios

    train = {"RLT-0": [1.0, 2.0, 1.0], "B=1": [2.5, 4.0, 3.0], "B=4": [1.2, 2.4, 1.5],
             "RLT-0 compiled": [0.5, 1.0, 0.5], "B=1 compiled": [0.9, 1.6, 1.0], "B=4 compiled": [0.6, 1.4, 0.7]}
    ratios = headline_ratios(train)
    assert ratios["rlt1_over_rlt0"] == pytest.approx(2.5)  # median of 2.5, 2.0, 3.0
    assert ratios["chunk4_over_rlt0"] == pytest.approx(1.2)
    assert ratios["rlt1_compiled_over_rlt0_compiled"] == pytest.approx(1.8)  # 1.8, 1.6, 2.0
    assert ratios["chunk4_compiled_over_rlt0_compiled"] == pytest.approx(1.4)  # 1.2, 1.4, 1.4
    assert ratios["rlt1_compiled_over_rlt0_eager"] == pytest.approx(0.9)  # 0.9, 0.8, 1.0
    assert ratios["rlt0_compiled_over_rlt0_eager"] == pytest.approx(0.5)
    assert goal_of("rlt1_compiled_over_rlt0_eager") == 2.0 and goal_of("chunk4_over_rlt0") == 1.3
    assert goal_of("rlt0_compiled_over_rlt0_eager") is None
    assert set(headline_ratios({k: train[k] for k in ("RLT-0", "B=1", "B=4")})) == {"rlt1_over_rlt0",
                                                                                     "chunk4_over_rlt0"}


def test_replot_draws_a_committed_record_again_and_refuses_another_benchmarks(tmp_path, capsys):
    """`looped bench replot` redraws the committed figures from their JSON (a plot change reaches them without
    re-measuring); a record of another benchmark is one line, not a KeyError traceback."""
    from pathlib import Path

    from looped.cli import main

    repo = Path(__file__).resolve().parents[1] / "results" / "bench"
    if not (repo / "scaling.json").exists():
        pytest.skip("no committed results/bench/scaling.json")
    out = tmp_path / "scaling.png"
    assert main(["bench", "replot", "scaling", str(repo / "scaling.json"), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
    assert main(["bench", "replot", "rlt", str(repo / "scaling.json"), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a `looped bench rlt` record" in err[0]
    assert not (tmp_path / "x.png").exists()


def test_bench_help_lists_replot_beside_the_benchmarks(capsys):
    """`looped bench --help` is where a user finds `replot`: the sub-command list must name it."""
    from looped.cli import main

    assert main(["bench", "--help"]) == 0
    listed = re.search(r"\{([\w,]+)\}", capsys.readouterr().out)  # the sub-command list, {train,decode,...}
    assert listed, "no sub-command list in `looped bench --help`"
    assert set(listed.group(1).split(",")) == {*BENCHES, "replot"}


def test_the_rlt_figure_keeps_legends_off_the_lines_and_names_the_model_size(tmp_path, monkeypatch):
    # results/bench/rlt.png's generation panel had its legend over crossing lines, and no parameter count
    import json
    from pathlib import Path

    from looped.bench import rlt as rlt_bench

    record = Path(__file__).resolve().parents[1] / "results" / "bench" / "rlt.json"
    if not record.exists():
        pytest.skip("no committed results/bench/rlt.json")
    kept = {}

    def keep(fig, path):
        renderer = fig.canvas.get_renderer()
        kept.update(title=fig._suptitle.get_text(), figure=fig.bbox, panels=[
            (ax.bbox, ax.get_legend().get_window_extent(renderer)) for ax in fig.axes if ax.get_legend()])

    monkeypatch.setattr(rlt_bench, "atomic_save_figure", keep)
    rlt_bench.plot(json.loads(record.read_text()), tmp_path / "rlt.png")
    assert "239,344–251,824 parameters" in kept["title"]
    assert len(kept["panels"]) == 2
    for axes, legend in kept["panels"]:
        assert legend.x0 >= axes.x1 and legend.x1 <= kept["figure"].x1  # beside its panel, inside the figure


def test_the_scaling_figure_names_the_size_of_its_models(tmp_path, monkeypatch):
    # results/bench/scaling.png said neither the width nor the parameter counts of the rows it times
    import json
    from pathlib import Path

    from looped.bench import scaling

    record = Path(__file__).resolve().parents[1] / "results" / "bench" / "scaling.json"
    if not record.exists():
        pytest.skip("no committed results/bench/scaling.json")
    kept = {}
    monkeypatch.setattr(scaling, "atomic_save_figure", lambda fig, path: kept.update(title=fig._suptitle.get_text()))
    scaling.plot(json.loads(record.read_text()), tmp_path / "scaling.png")
    assert "d 128 rows, 379,520–968,544 parameters" in kept["title"]


def test_a_record_names_the_command_that_wrote_it(tmp_path, monkeypatch):
    """Records kept no command line: the README's command for results/bench/exit_r4.json had to be rebuilt from
    the record's fields. Called from Python (not `looped bench`), a record says so with None."""
    import json

    from looped.cli import main as looped_main

    out = tmp_path / "d.json"
    words = ["bench", "decode", "--dim", "16", "--heads", "2", "--layers", "1", "--ffn-dim", "32", "--context",
             "24", "--prompt", "4", "--stride", "8", "--repeats", "1", "--out", str(out)]
    monkeypatch.setattr("sys.argv", ["looped", *words])
    assert looped_main(words) == 0
    assert json.loads(out.read_text())["environment"]["command"] == "looped " + " ".join(words)
    monkeypatch.setattr("sys.argv", ["pytest", "-q"])
    assert cli(words[1:]) == 0 and json.loads(out.read_text())["environment"]["command"] is None
