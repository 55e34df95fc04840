"""The per-round trace (looped/models/trace.py) and the lens built on it (looped/eval/lens.py, `looped lens`)."""

from __future__ import annotations

import json

import lm_drivers
import pytest
import reasoning_drivers
import torch
from helpers import CORE, LOOP, core_config, train_tiny, write_text_corpus

from looped.cli import main
from looped.config import from_dict
from looped.eval.lens import position_bucket_edges
from looped.eval.lm import position_buckets
from looped.models import arch_names, get_arch
from looped.train import RunConfig, Trainer

# rows without a depth to trace refuse in one line; every other registered row must trace to its forward
NO_TRACE = {"rlt", "rlt0", "rlt_baseline", "lstm"}


def lm_tokens(model, length: int = 24) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (2, length), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("arch", arch_names("lm"))
def test_last_traced_round_is_the_forward(arch):
    model = lm_drivers.tiny_model(arch)
    tokens = lm_tokens(model)
    if arch in NO_TRACE:
        with pytest.raises(ValueError, match="no per-round trace"):
            model.trace(tokens)
        return
    for depth in lm_drivers.depths(arch):
        with torch.no_grad():
            entries = list(model.trace(tokens, rounds=depth))
            forward = model(tokens, rounds=depth)
        assert len(entries) == (depth or model.config.layers)
        assert [e.depth for e in entries] == list(range(1, len(entries) + 1))
        torch.testing.assert_close(entries[-1].logits, forward, rtol=0, atol=1e-5)


@pytest.mark.parametrize("arch", [a for a in arch_names("lm") if get_arch(a).test_depths])
def test_every_traced_round_of_a_loop_is_the_forward_at_that_depth(arch):
    """What `looped depth` relies on to score every depth in one pass."""
    model = lm_drivers.tiny_model(arch)
    tokens = lm_tokens(model)
    with torch.no_grad():
        entries = list(model.trace(tokens, rounds=5))
        for entry in entries:
            torch.testing.assert_close(entry.logits, model(tokens, rounds=entry.depth), rtol=0, atol=1e-5)


def test_adaptive_exit_weights_of_a_call_sum_to_one():
    model = lm_drivers.tiny_model("adaptive_exit")
    with torch.no_grad():
        for rounds in (2, 4, 6):
            weights = sum(e.stats["exit weight"] for e in model.trace(lm_tokens(model), rounds=rounds))
            torch.testing.assert_close(weights, torch.ones_like(weights))


@pytest.mark.parametrize("arch,kind", reasoning_drivers.cases(arch_names("reasoning")))
def test_last_traced_step_is_the_forward(arch, kind):
    model, batch = reasoning_drivers.tiny_model(arch, kind), reasoning_drivers.rows(kind)
    steps = reasoning_drivers.budgets(model)[1]
    with torch.no_grad():
        entries = list(model.trace(batch, steps))
        torch.testing.assert_close(entries[-1].logits, model(batch, steps), rtol=0, atol=1e-5)
        if model.depth_mode != "fixed":  # every step is the forward at that budget
            for entry in entries:
                torch.testing.assert_close(entry.logits, model(batch, entry.depth), rtol=0, atol=1e-5)


# ============================================================================ `looped lens`

import json  # noqa: E402


from looped.cli import main  # noqa: E402
from looped.config import from_dict  # noqa: E402
from looped.eval.lens import position_bucket_edges  # noqa: E402
from looped.eval.lm import position_buckets  # noqa: E402
from looped.train import RunConfig, Trainer  # noqa: E402
from helpers import CORE, LOOP, core_config, train_tiny, write_text_corpus  # noqa: E402


def lens(run, tmp_path, capsys, *args) -> tuple[int, dict | None, str]:
    out = tmp_path / "lens.json"
    code = main(["lens", str(run), "--out", str(out), "--no-progress", *args])
    err = capsys.readouterr().err
    return code, json.loads(out.read_text()) if code == 0 else None, err


def scored(run, capsys, *args) -> dict:
    assert main(["eval", str(run), "--no-progress", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("model", [{**LOOP, "arch": "adaptive_exit"},
                                   {"arch": "transformer", "dim": 32, "heads": 4, "layers": 2, "ffn_dim": 48,
                                    "context_length": 64}])
def test_lens_of_a_file_ends_at_the_forward(model, tmp_path, capsys):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 8_000)
    run = train_tiny(tmp_path / "run", corpus, model)
    notes = write_text_corpus(tmp_path / "notes.txt", 1_500, seed=4)
    code, record, _ = lens(run, tmp_path, capsys, "--file", str(notes))
    assert code == 0 and (tmp_path / "lens.png").stat().st_size > 0
    entry = record["sources"][0]
    assert entry["file"] == str(notes) and record["depth"] == 2
    last = entry["rounds"][-1]
    assert last["bits_per_byte"] == pytest.approx(scored(run, capsys, "--file", str(notes))["bits_per_byte"], rel=1e-7)
    assert entry["rounds"][0]["movement"] is None and last["movement"] > 0
    assert [(b["first"], b["last"]) for b in last["by_position"]] == position_bucket_edges(64)
    if model["arch"] == "adaptive_exit":  # the router's weights over one call's exits add up to 1
        assert sum(row["stats"]["exit weight"] for row in entry["rounds"]) == pytest.approx(1.0)
        assert record["depth_name"] == "round"
    else:
        assert record["depth_name"] == "layer" and entry["rounds"][0]["stats"] == {}


def test_bucket_edges_are_those_of_eval_by_position():
    for length in (1, 7, 40, 64, 512):
        expected = [(b["first"], b["last"]) for b in position_buckets(torch.zeros(length))]
        assert position_bucket_edges(length) == expected


def test_lens_of_a_core_reads_accuracy_and_gate_per_step(tmp_path, capsys):
    run = tmp_path / "core"
    Trainer(from_dict(RunConfig, core_config({**CORE, "gate": True})), run, progress=False, log=lambda m: None).run()
    code, record, _ = lens(run, tmp_path, capsys, "--depth", "5")
    assert code == 0 and record["kind"] == "reasoning" and record["depth"] == 5
    rows = record["sources"][0]["rounds"]
    assert [r["depth"] for r in rows] == [1, 2, 3, 4, 5] and all(0 < r["stats"]["gate"] < 1 for r in rows)
    assert main(["depth", str(run), "--max-factor", "2", "--out", str(tmp_path / "d.json"), "--no-progress"]) == 0
    capsys.readouterr()
    swept = json.loads((tmp_path / "d.json").read_text())["sources"][0]["fixed"]
    assert [r["by_difficulty"] for r in rows] == [p["by_difficulty"] for p in swept[:5]]


def test_lens_refuses_bad_values_in_one_line(tmp_path, capsys):
    corpus = write_text_corpus(tmp_path / "corpus.txt", 8_000)
    run = train_tiny(tmp_path / "run", corpus, LOOP)
    for args, message in ((["--depth", "0"], "--depth must be >= 1"), (["--file", "missing.txt"], "missing.txt")):
        code, _, err = lens(run, tmp_path, capsys, *args)
        assert code == 2 and err.count("\n") == 1 and err.startswith("looped: error: ") and message in err


def test_the_lens_plot_keeps_its_position_legend_off_the_lines(monkeypatch):
    # workspace_lens.png's legend sat over the 'positions 1-1' line: the buckets' lines fill the panel's height
    import looped.eval.lens as lens

    buckets = [(1, 1), (2, 3), (4, 7)]
    rounds = [{"depth": d, "bits_per_byte": 3.0 - d / 10, "movement": None if d == 1 else 1 / d, "stats": {},
               "by_position": [{"first": a, "last": b, "bits_per_byte": 4.0 - d / 10 - a / 10} for a, b in buckets]}
              for d in (1, 2, 3, 4)]
    record = {"kind": "lm", "arch": "workspace", "parameters": 348457, "depth_name": "round", "trained_depth": 2,
              "sources": [{"corpus": "kjv", "heldout": True, "unit": "byte", "targets": 1024, "rounds": rounds}]}
    kept = {}

    def keep(fig, path):
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        legend = ax.get_legend()
        kept.update(legend=legend.get_window_extent(renderer), axes=ax.bbox, figure=fig.bbox, right=fig.axes[1].bbox,
                    labels=[t.get_text() for t in legend.get_texts()])

    monkeypatch.setattr(lens, "atomic_save_figure", keep)
    lens.plot_lens(record, "lens.png")
    legend, axes, figure = kept["legend"], kept["axes"], kept["figure"]
    assert legend.x0 >= axes.x1 and legend.x1 <= min(figure.x1, kept["right"].x0)  # between the two panels
    assert kept["labels"] == ["all", "position 1", "positions 2-3", "positions 4-7"]
