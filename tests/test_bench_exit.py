"""`looped bench exit`: early exit against fixed depth when decoding a batch. Speed is never asserted (a shared
machine makes thresholds flaky); what the record claims about depth, FLOPs and bits/byte is."""

import json

import pytest

from looped.bench import cli
from looped.bench.early_exit import MODES, run_exit_bench
from looped.models import build_model, get_arch

TINY = dict(arch="shared_loop", dim=32, heads=4, ffn_dim=48, context=40, prompt=4, steps=6, repeats=1)


def test_exit_bench_records_depth_flop_saving_and_bits_per_byte_per_batch(tmp_path):
    # total variation is always < 1: threshold 1 stops every token after round 2 of 4
    result = run_exit_bench(1.0, batches=(1, 3), out=tmp_path / "exit.json", **TINY)
    assert json.loads((tmp_path / "exit.json").read_text())["batches"].keys() == {"1", "3"}
    entry = result["batches"]["3"]
    assert entry["mean_depth"] == 2.0 and entry["depth_histogram"] == [0, 18, 0, 0]
    assert all(entry[mode]["tokens_per_s"] > 0 and len(entry[mode]["samples"]) == 1 for mode in MODES)
    # two of four rounds saved: against the ledger at the mean number of keys, half of the rounds' FLOPs
    flops = entry["flops"]
    ledger = build_model(get_arch("shared_loop").config(dim=32, heads=4, ffn_dim=48, context_length=40)).ledger(
        flops["keys"], 4)
    per_round, outside = sum(ledger.rounds[0].values()), sum(ledger.outside.values())
    assert flops["saving"] == pytest.approx(2 * per_round / (outside + 4 * per_round))
    assert flops["saving_with_upkeep"] < flops["saving"]  # the keys of skipped rounds and the extra readouts
    bpb = entry["bits_per_byte"]
    assert bpb["stream"] == pytest.approx(bpb["lockstep"], rel=1e-6)
    assert max(bpb["relative_difference"].values()) < 1e-6  # batching changes nothing a row predicts
    assert bpb["fixed"] != pytest.approx(bpb["stream"], rel=1e-6)  # while exiting early does
    assert result["goal"]["applies"] is False  # no batch 8 measured


def test_exit_bench_cli_prints_the_table_and_judges_the_goal_at_batch_8(tmp_path, capsys):
    args = ["exit", "--threshold", "1.0", "--arch", "shared_loop", "--dim", "32", "--heads", "4", "--ffn-dim", "48",
            "--context", "40", "--prompt", "4", "--steps", "4", "--repeats", "1", "--batches", "8",
            "--out", str(tmp_path / "exit.json")]
    assert cli(args) == 0
    out = capsys.readouterr().out
    assert "stream tok/s" in out and "batch 8, stream: time saving / FLOP saving" in out
    goal = json.loads((tmp_path / "exit.json").read_text())["goal"]
    assert goal["applies"] and all(goal["bits_per_byte_close"].values())
    assert goal["met"] == {mode: goal["ratio"][mode] >= 0.7 for mode in ("lockstep", "stream")}


@pytest.mark.parametrize("arch, threshold, depth", [("exit_gate_loop", 0.0, 1), ("prelude_coda", 1e9, 2)])
def test_the_other_exit_families_are_benched_in_lockstep_with_their_upkeep_counted(arch, threshold, depth, tmp_path):
    """exit_gate_loop (q = 0: every token exits after step 1) and prelude_coda (KL < 1e9: every token after
    iteration 2) have no streaming mode; what an exited token still computes (the stack's earlier blocks, the
    coda every iteration) is counted by FlopCounterMode, so the saving with upkeep is below the depth's."""
    result = run_exit_bench(threshold, batches=(3,), out=tmp_path / "exit.json",
                            **{**TINY, "arch": arch, "dim": 16, "heads": 2, "ffn_dim": 24, "rounds": 4})
    entry = result["batches"]["3"]
    assert "stream" not in entry and set(entry["time_saving"]) == {"lockstep"}
    assert entry["mean_depth"] == depth
    flops, counted = entry["flops"], entry["flops"]["counted_per_token"]
    assert flops["saving_with_upkeep"] == pytest.approx(1 - counted["lockstep"] / counted["fixed"])
    # below the depth's saving (at this tiny width prelude_coda's head every iteration even costs more than it saves)
    assert flops["saving_with_upkeep"] < flops["saving"]
    assert entry["bits_per_byte"]["relative_difference"]["lockstep"] < 1e-6


@pytest.mark.parametrize("options, message", [
    (dict(threshold=-0.1), "--threshold must be >= 0"),
    (dict(batches=(0, 8)), "--batches must be positive"),
    (dict(steps=40), r"prompt 4 \+ steps 40 \+ 1 > context_length 40"),
    (dict(arch="transformer"), "measures rows with a per-position exit"),
])
def test_exit_bench_refuses_bad_options_in_one_line(options, message, tmp_path):
    kwargs = {**TINY, "batches": (1,), "out": None, **options}
    threshold = kwargs.pop("threshold", 1.0)
    with pytest.raises(ValueError, match=message):
        run_exit_bench(threshold, **kwargs)
