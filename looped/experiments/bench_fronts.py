"""The README's benchmark tables, generated from the records the benchmarks wrote (results/bench/*.json and
results/quickstart.json), so that the README types no figure and every goal verdict is the record's figure held
against the goal constant of the benchmark that measured it (looped.bench.*).

    python -m looped.experiments.summary README.md     # rewrites these blocks with the other generated blocks

    benchmarks_block(results)    one line per benchmark: what it measured, its headline figures, the command
    performance_block(results)   issue 19's performance ratios beside their goals and seed 003's own figures, and
                                 where the time goes where a goal is missed
    scaling_block(results)       decoding time and state memory against context, training step time against depth

A record that is not committed reads as a cell (or a block) saying so: a fresh clone's README stays valid.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..bench import clw as clw_bench
from ..bench import ddp as ddp_bench
from ..bench import decode as decode_bench
from ..bench import early_exit as exit_bench
from ..bench import rlt as rlt_bench
from ..bench import think as think_bench
from ..bench import train as train_bench
from .paper_fronts import block, markers
from .render import Column, bullets, left, table
from .report import MISSING, figure, span
from .rlt import PAPER_STEP_RATIOS

MIB = 2**20
Record = dict


# --- reading --------------------------------------------------------------------------------------------------
def read(results: Path, name: str) -> Record | None:
    """The JSON record results/<name> ('bench/train.json' ...); None while it is not committed."""
    path = Path(results) / name
    return json.loads(path.read_text()) if path.exists() else None


def not_committed(name: str) -> str:
    """What a cell (or a block) says in place of a record that is not committed yet."""
    return f"`results/{name}` is not committed yet"


# --- goals ----------------------------------------------------------------------------------------------------
def bound(value: float, upper: bool = True, unit: str = "") -> str:
    """A goal's bound as the tables write it: '≤ 2', '≥ 0.95', '≥ 10×', '≤ 1e-5'."""
    return f"{'≤' if upper else '≥'} {number(value)}{unit}"


def number(value: float) -> str:
    """A constant or a small figure in its shortest form: 2, 0.95, 1e-5, 8.3e-7 (`:g` without exponent zeros)."""
    return f"{value:g}".replace("e-0", "e-")


def verdict(value: float, goal: float, upper: bool = True, unit: str = "", where: str = "") -> str:
    """'goal ≤ 2, missed': the record's figure judged against the goal constant, never typed. `where` follows the
    bound ('at every batch', with the worst of the batches as `value`)."""
    met = value <= goal if upper else value >= goal
    return f"goal {bound(goal, upper, unit)}{where}, {'met' if met else 'missed'}"


def rlt_verdict(ratios: dict, name: str) -> str:
    """A headline ratio of `looped bench rlt` and its verdict against the goal of its kind (rlt_bench.goal_of)."""
    return f"**{ratios[name]:.2f}** ({verdict(ratios[name], rlt_bench.goal_of(name))})"


def paper_ratio(name: str, where: str = "seed 003") -> str:
    """The paper's step-time ratio of one headline (looped.experiments.rlt.PAPER_STEP_RATIOS), '4.17–4.30 (...)'."""
    return f"{span(PAPER_STEP_RATIOS[name], 2)} ({where})"


def threads(n: int) -> str:
    return f"{n} thread{'' if n == 1 else 's'}"


# --- the lines of a table -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    """One table line: what a benchmark measured, the record its command wrote (under results/), how the record
    reads as the line's figures, and the command. `shape` adds the record's own shape after `what`; `goal` and
    `paper` fill the performance table's columns (the goal constant's bound, seed 003's figure)."""

    what: str
    file: str
    command: str  # markdown: the command(s) in backticks
    result: Callable[[Record], str]
    shape: Callable[[Record], str] | None = None
    goal: str = MISSING
    paper: str = MISSING


Item = tuple[Line, Record | None]  # a line and its record (None: not committed)


def items(results: Path, lines: tuple[Line, ...]) -> list[Item]:
    """Each line with its record, every file read once."""
    records = {name: read(results, name) for name in dict.fromkeys(line.file for line in lines)}
    return [(line, records[line.file]) for line in lines]


def what(item: Item) -> str:
    line, found = item
    return line.what + (f" ({line.shape(found)})" if found is not None and line.shape else "")


def result(item: Item) -> str:
    line, found = item
    return line.result(found) if found is not None else not_committed(line.file)


WHAT = left("what", what)
RESULT = left("result", result)
COMMAND = left("command", lambda item: item[0].command)


# --- the benchmarks table ---------------------------------------------------------------------------------------
def quickstart(r: Record) -> str:
    """The quickstart's held-out score, its training time and the compressors' rates on the same books."""
    compressors = ", ".join(f"{name} {figure(v, 3)}" for name, v in r["compressors_bits_per_byte"].items())
    return (f"**{figure(r['bits_per_byte'], 4)} bits/byte** (NLL {figure(r['nll'], 4)} nats, PPL {figure(r['ppl'], 2)})"
            f" over {r['targets']:,} scored bytes, {figure(r['minutes'], 1)} min of training ({r['torch_threads']} "
            f"torch threads, load average {figure(r['load_average_at_end'], 1)} at the end); the same books under "
            f"{compressors} bits/byte")


def train_shape(r: Record) -> str:
    s = r["shape"]
    return f"{s['arch']}, d {s['dim']}, seq {s['seq']}, batch {s['batch']}, {threads(r['environment']['threads'])}"


def throughput(r: Record) -> str:
    """ours / reference tokens/s, judged only at the shape the goal is stated for (train_bench.GOAL_SHAPE)."""
    ratio = r["ratio"]["median_of_pairs"]
    at_goal_shape = r["shape"]["arch"] == "transformer" and \
        all(r["shape"].get(k) == v for k, v in train_bench.GOAL_SHAPE.items())
    judged = f" ({verdict(ratio, train_bench.TARGET_RATIO, upper=False)})" if at_goal_shape else ""
    return f"ours / reference tokens/s **{ratio:.3f}**{judged}, the median of per-step pairs"


def decoding(r: Record) -> str:
    """Per-token time incremental vs recomputed at the goal's context, the speed-up, and the equivalence check."""
    at = r["at_context"][str(decode_bench.GOAL_CONTEXT)]
    speedup = at["speedup"]
    diff = number(float(f"{r['equivalence']['max_abs_diff']:.1e}"))
    return (f"{1e3 * at['incremental_s']:.3g} vs {1e3 * at['recompute_s']:.3g} ms per token, **{speedup:.1f}×** "
            f"({verdict(speedup, decode_bench.TARGET_SPEEDUP, upper=False, unit='×')}); incremental = full forward "
            f"within {diff}")


def ddp(r: Record) -> str:
    value = r["max_relative_difference"]
    judged = verdict(value, ddp_bench.GOAL_MAX_RELATIVE_DIFFERENCE)
    return f"max relative loss difference **{number(value)}** ({judged})"


def clw_shape(r: Record) -> str:
    t = r["train"]
    params = span([row["parameters"] for row in t["rows"].values()], 1, 1e-6)
    return (f"{params}M parameters, seq {t['shape']['seq']}, batch {t['shape']['batch']}, {t['step']}, "
            f"{threads(t['threads'])}, {len(t['rows']['plain']['samples'])} rounds")


def clw_times(r: Record) -> str:
    """The workspace / anchored headline against its goal, then every row's step time over the plain row's."""
    t = r["train"]
    ratio = t["workspace_over_anchored"]["median_of_rounds"]
    per_round = [w / a for w, a in zip(t["rows"]["workspace"]["samples"], t["rows"]["anchored_loop"]["samples"])]
    others = {row: v for row, v in t["relative_to_plain"].items() if row != "plain"}
    return (f"workspace / anchored step time **{ratio:.3f}** ({verdict(ratio, clw_bench.GOAL_RATIO)}), the median "
            f"of per-round ratios {span(per_round, 2)}; the ratio of the two medians "
            f"{t['workspace_over_anchored']['ratio_of_medians']:.2f}; × plain: "
            + ", ".join(f"{row} {v:.2f}" for row, v in others.items()))


def clw_decode_shape(r: Record) -> str:
    d = r["decode"]
    return f"context {d['context']}, prompt {d['prompt']}, {threads(d['threads'])}"


def clw_decoding(r: Record) -> str:
    """The slowest and fastest row's incremental speed-up over recomputing, and the workspace row's."""
    rows = r["decode"]["rows"]
    ordered = sorted(rows, key=lambda row: rows[row]["speedup_at_context"])
    low, high, ws = rows[ordered[0]], rows[ordered[-1]], rows["workspace"]
    return (f"{low['speedup_at_context']:.1f}× ({ordered[0]}) to {high['speedup_at_context']:.1f}× ({ordered[-1]}); "
            f"workspace {ws['speedup_at_context']:.1f}×, {ws['tokens_per_s']:.0f} tokens/s")


def think_shape(r: Record) -> str:
    s = r["shape"]
    return (f"d {s['dim']}, {s['layers']}-layer CoT baseline with KV cache, T = {s['steps'][0]}…{s['steps'][-1]}, "
            f"batch {' / '.join(map(str, s['batches']))}")


def thinking(r: Record) -> str:
    """The core's memory against T (flat goal), the KV cache's growth and crossover, the core's latency fit."""
    g, batches = r["goals"], r["shape"]["batches"]
    flat = max(abs(v) for v in g["core_memory_flat"]["relative_change_max_vs_min_steps"].values())
    kv = {r["crossover"][str(b)]["kv_bytes_per_thinking_token"] / b / 1024 for b in batches}
    crossover = " / ".join(f"{r['crossover'][str(b)]['crossover_steps']:.0f}" for b in batches)
    r2 = [g["core_latency_linear"]["fits"][str(b)]["r2"] for b in batches]
    every = " at every batch"
    return (f"core peak memory at T = {r['shape']['steps'][-1]} within **{100 * flat:.2g} %** of T = "
            f"{r['shape']['steps'][0]} ({verdict(100 * flat, 100 * think_bench.FLAT_TOLERANCE, unit=' %', where=every)}"
            f"); the KV cache grows {' / '.join(f'{v:g}' for v in sorted(kv))} KiB per thinking token per row and "
            f"overtakes the core at T ≈ {crossover}; core latency linear in T: R² "
            f"{' / '.join(f'{v:.4f}' for v in r2)} ({verdict(min(r2), think_bench.LINEAR_R2, False, where=every)})")


def rlt_shape(r: Record) -> str:
    s = r["shape"]
    parts = [f"d {s['dim']}", f"{s['encoder_layers']}+{s['decoder_layers']}", f"batch {s['batch']}", f"length {s['seq']}"]
    return ", ".join([*parts, threads(r["threads"])])


def sweep(r: Record) -> str:
    intervals = [row.split("=")[1] for row in r["rows"] if row.startswith("B=")]
    return "B ∈ {" + ", ".join(intervals) + "}; " + rlt_shape(r)


def profile(p: dict) -> str:
    """A profiled training step as the README states it: aten calls per position and self time by kind."""
    shares = sorted(p["share_by_kind"].items(), key=lambda kv: -kv[1])
    return (f"{p['aten_calls_per_position']:,.0f} aten calls per position; self time "
            + "; ".join(f"{kind} {100 * v:.0f} %" for kind, v in shares if v >= 0.005))


def feedback_sweep(r: Record) -> str:
    """The two headline ratios against their goals and the paper's, the rows' peak bytes, RLT-1's profile."""
    ratios, peak = r["ratios"], {row: r["rows"][row]["memory"]["peak_step_bytes"] / MIB for row in ("B=1", "B=4",
                                                                                                  "RLT-0")}
    return (f"RLT-1 / RLT-0 step time {rlt_verdict(ratios, 'rlt1_over_rlt0')}, chunk 4 / RLT-0 "
            f"{rlt_verdict(ratios, 'chunk4_over_rlt0')}; the paper (CPU, 4+4): "
            f"{span(PAPER_STEP_RATIOS['rlt1_over_rlt0'], 2)} and {span(PAPER_STEP_RATIOS['chunk4_over_rlt0'], 2)}. "
            f"Peak live bytes of a training step: RLT-1 {peak['B=1']:.1f} MiB, chunk 4 {peak['B=4']:.1f}, RLT-0 "
            f"{peak['RLT-0']:.1f}. RLT-1: {profile(r['profile_rlt1'])} (what was tried: CHANGELOG)")


BENCHMARKS = (
    Line("quickstart: `configs/quickstart.yaml` on the KJV, scored on the held-out books", "quickstart.json",
         "`looped quickstart --record results/quickstart.json`; `python -m looped.eval.compressors`", quickstart),
    Line("training throughput against a minimal reference GPT of the same shapes", "bench/train.json",
         "`looped bench train --out results/bench/train.json`", throughput, train_shape),
    Line("decoding with the incremental state vs recomputing the prefix", "bench/decode.json",
         "`looped bench decode --out results/bench/decode.json`", decoding,
         lambda r: f"batch {r['shape']['batch']}, context {decode_bench.GOAL_CONTEXT}"),
    Line("DDP vs one process, same global batch", "bench/ddp.json", "`looped bench ddp --out results/bench/ddp.json`",
         ddp, lambda r: f"{r['procs']} gloo processes, global batch {r['global_batch']}, {r['steps']} updates"),
    Line("seed 000 rows side by side, small budget", "bench/clw_small.json",
         "`looped bench clw --no-decode --out results/bench/clw_small.json`", clw_times, clw_shape),
    Line("seed 000 rows side by side, larger budget", "bench/clw_medium.json",
         "`looped bench clw --budget medium --steps 6 --out results/bench/clw_medium.json`", clw_times, clw_shape),
    Line("seed 000 decoding, every row, incremental vs recomputing the prefix", "bench/clw_decode.json",
         "`looped bench clw --decode-only --out results/bench/clw_decode.json`", clw_decoding, clw_decode_shape),
    Line("seed 002 core vs chain of thought at inference", "bench/think.json",
         "`looped bench think --out results/bench/think.json`, `think.png`", thinking, think_shape),
    Line("seed 003 feedback sweep vs RLT-0", "bench/rlt.json", "`looped bench rlt --out results/bench/rlt.json`, "
         "`rlt.png`", feedback_sweep, sweep),
)
BENCH = "benchmarks"


def benchmarks_block(results: Path) -> str:
    """One line per benchmark record: what it measured, its headline figures with their goals, the command."""
    intro = ("Each line is read from the record its command wrote (`results/bench/*.json`, `results/quickstart.json`;"
             " `looped bench replot NAME FILE` redraws a record's figure); a goal's verdict is the record's figure "
             "against the benchmark's goal constant (`looped/bench/`).")
    return block(BENCH, intro, table([WHAT, RESULT, COMMAND], items(results, BENCHMARKS)))


# --- the performance goals (issue 19) ---------------------------------------------------------------------------
RLT_COMPILED = "`looped bench rlt --intervals 1 4 --threads 1 --compile --out results/bench/rlt_perf_compiled.json`"
EXIT_GOAL = f"{bound(exit_bench.GOAL_RATIO, False)} (bits/byte within {number(100 * exit_bench.GOAL_BPB)} %)"


def both_eager(r: Record) -> str:
    ratios = r["ratios"]
    return f"{rlt_verdict(ratios, 'rlt1_over_rlt0')} and {rlt_verdict(ratios, 'chunk4_over_rlt0')}"


def compiled_ratio(name: str, beside: str, label: str) -> Callable[[Record], str]:
    """A compiled / compiled headline with its verdict, and the same row compiled over eager RLT-0 beside it."""
    return lambda r: f"{rlt_verdict(r['ratios'], name)}; {label} compiled / eager RLT-0 {r['ratios'][beside]:.2f}"


def compile_gain(r: Record) -> str:
    """RLT-1's and RLT-0's compiled / eager step time, each the median of per-round ratios (as the record's)."""
    rows = {**r["rows"], **r["compiled_rows"]}
    times = {name: row["train_step"]["samples"] for name, row in rows.items()}
    ms = {name: rows[name]["train_step"]["median_s"] for name in ("B=1", "B=1 compiled")}
    return (f"RLT-1 **{rlt_bench.pair_ratio(times, 'B=1 compiled', 'B=1'):.2f}** (medians {ms['B=1 compiled']:.3f} "
            f"against {ms['B=1']:.3f} s), RLT-0 {rlt_bench.pair_ratio(times, 'RLT-0 compiled', 'RLT-0'):.2f}")


def workspace_decoding(r: Record) -> str:
    side = r["decode"]["workspace_over_anchored_tokens_per_s"]
    calls = {row: c["kernel_calls"] for row, c in side["operator_calls_per_token"].items()}
    ratio = side["median_of_token_pairs"]
    return (f"**{ratio:.3f}** ({verdict(ratio, clw_bench.DECODE_GOAL, upper=False)}); kernel calls per token "
            f"{calls['workspace']:.0f} against {calls['anchored_loop']:.0f}")


def exit_shape(r: Record) -> str:
    entry = r["batches"][str(exit_bench.GOAL_BATCH)]
    m = r["model"]
    return (f"{m['arch']} d {m['config']['dim']}, {m['source']}, {entry['rounds']} rounds, threshold "
            f"{r['shape']['threshold']:g}, mean depth {entry['mean_depth']:.2f}")


def exit_saving(r: Record) -> str:
    """Each mode's time saving over FLOP saving at the goal's batch, judged as early_exit.exit_goal judges it."""
    entry = r["batches"][str(exit_bench.GOAL_BATCH)]
    parts = []
    for mode, ratio in entry["time_saving_over_flop_saving"].items():
        close = entry["bits_per_byte"]["relative_difference"][mode] <= exit_bench.GOAL_BPB
        met = ratio >= exit_bench.GOAL_RATIO and close
        parts.append(f"{mode} **{ratio:.2f}** ({'met' if met else 'missed'}"
                     f"{'' if close else '; bits/byte off single-row exit'})")
    return ", ".join(parts)


def compile_speed(r: Record) -> str:
    """Compiled over eager tokens/s; beside it ours / reference eager where the two have the same parameters."""
    ratio = r["ratio"]
    same = f" (eager ours / reference {ratio['median_of_pairs']:.2f} in the same run)" if r["parameters"]["equal"] \
        else ""
    return f"**{ratio['compiled_over_eager_tokens_per_s']:.2f}**{same}"


def exit_command(name: str, rounds: int, threshold: float) -> str:
    return (f"`looped bench exit --arch anchored_loop --dim 512 --heads 8 --ffn-dim 2048 --rounds {rounds} "
            f"--threshold {threshold:g} --steps 32 --repeats 3 --out results/bench/{name}.json`")


RLT_GOALS = {name: bound(rlt_bench.goal_of(name)) for name in ("rlt1_over_rlt0", "chunk4_over_rlt0")}
PERFORMANCE = (
    Line("RLT-1 / RLT-0 training step time, both `train.compile`", "bench/rlt_perf_compiled.json", RLT_COMPILED,
         compiled_ratio("rlt1_compiled_over_rlt0_compiled", "rlt1_compiled_over_rlt0_eager", "RLT-1"), rlt_shape,
         RLT_GOALS["rlt1_over_rlt0"], paper_ratio("rlt1_over_rlt0", "seed 003, CPU, 4+4")),
    Line("RLT-2 chunk 4 / RLT-0 training step time, both compiled", "bench/rlt_perf_compiled.json", RLT_COMPILED,
         compiled_ratio("chunk4_compiled_over_rlt0_compiled", "chunk4_compiled_over_rlt0_eager", "chunk 4"), None,
         RLT_GOALS["chunk4_over_rlt0"], paper_ratio("chunk4_over_rlt0")),
    Line("the same two ratios eager (static decoder step), same run", "bench/rlt_perf_compiled.json", RLT_COMPILED,
         both_eager, None, ", ".join(RLT_GOALS.values())),
    Line("the same two ratios eager, before the static decoder step", "bench/rlt_perf.json",
         "`looped bench rlt --intervals 1 4 --threads 1 --out results/bench/rlt_perf.json`", both_eager, None,
         ", ".join(RLT_GOALS.values())),
    Line("compiled / eager training step time of RLT-1 and of RLT-0, same run", "bench/rlt_perf_compiled.json",
         RLT_COMPILED, compile_gain),
    Line("workspace / anchored loop decoding tokens/s, small budget, batch 1", "bench/clw_decode.json",
         "`looped bench clw --decode-only --out results/bench/clw_decode.json`", workspace_decoding, clw_decode_shape,
         bound(clw_bench.DECODE_GOAL, upper=False), "– (seed 000: constant workspace work per token)"),
    Line(f"early exit / fixed depth decoding, batch {exit_bench.GOAL_BATCH}: time saving over the FLOP saving of the "
         "mean depth, bits/byte against every row decoded alone", "bench/exit.json", exit_command("exit", 8, 0.06),
         exit_saving, exit_shape, EXIT_GOAL, "– (issue 30)"),
    Line("the same at a shallower loop", "bench/exit_r4.json", exit_command("exit_r4", 4, 0.065), exit_saving,
         exit_shape, EXIT_GOAL),
    Line("compiled / eager training tokens/s, plain Transformer", "bench/train_compile.json",
         "`looped bench train --compile --steps 10 --threads 1 --out results/bench/train_compile.json`", compile_speed,
         train_shape, MISSING, "– (SPEC: no gain here)"),
    Line("compiled / eager training tokens/s, anchored loop", "bench/train_compile_anchored.json",
         "`looped bench train --arch anchored_loop --compile --steps 8 --threads 1 --out "
         "results/bench/train_compile_anchored.json`", compile_speed, train_shape),
)
PERF = "performance goals"


def where_time_goes(results: Path) -> list[str]:
    """Where the time goes where a goal is missed, from the profiles the records hold."""
    eager, compiled = read(results, "bench/rlt_perf.json"), read(results, "bench/rlt_perf_compiled.json")
    decode = read(results, "bench/clw_decode.json")
    found = [
        f"RLT-1, eager (`results/bench/rlt_perf.json`, `profile_rlt1`): {profile(eager['profile_rlt1'])}" if eager
        else not_committed("bench/rlt_perf.json"),
        f"RLT-1, compiled (`results/bench/rlt_perf_compiled.json`, `profile_rlt1_compiled`): "
        f"{profile(compiled['profile_rlt1_compiled'])}; eager in the same run "
        f"{compiled['profile_rlt1']['aten_calls_per_position']:,.0f} aten calls per position" if compiled
        else not_committed("bench/rlt_perf_compiled.json")]
    if decode is None:
        return [*found, not_committed("bench/clw_decode.json")]
    calls = decode["decode"]["workspace_over_anchored_tokens_per_s"]["operator_calls_per_token"]
    ws, anchored = calls["workspace"]["kernel_calls"], calls["anchored_loop"]["kernel_calls"]
    return [*found, f"Workspace decoding (`results/bench/clw_decode.json`, `operator_calls_per_token`): {ws:.0f} "
                    f"kernel calls per token against the anchored loop's {anchored:.0f} (views and allocations not "
                    f"counted), which bounds the eager tokens/s ratio near {anchored:.0f} / {ws:.0f} = "
                    f"{anchored / ws:.2f} by count"]


def performance_block(results: Path) -> str:
    """Issue 19's ratios beside their goals and the seeds' figures, then where the time goes."""
    columns = [left("ratio", what), left("here", result), Column("goal", lambda item: item[0].goal),
               Column("seed's figure", lambda item: item[0].paper), COMMAND]
    intro = ("Rows timed side by side in one run, so that machine load hits both; the goals are the benchmarks' "
             "constants (`looped/bench/`), seed 003's figure is its paper's CPU timing (`PAPER_STEP_RATIOS` in "
             "`looped/experiments/rlt.py`).")
    return block(PERF, intro, [*table(columns, items(results, PERFORMANCE)), "",
                               "Where the time goes where a goal is missed:", "", bullets(where_time_goes(results))])


# --- how cost grows ---------------------------------------------------------------------------------------------
SCALING_FILE = "bench/scaling.json"
SCALING = "cost growth"


def depth_of(config: dict) -> str:
    """A decoded row's depth as the table's intro names it: layers, rounds, or an encoder + decoder split."""
    if "encoder_layers" in config:
        return f"{config['encoder_layers']}+{config['decoder_layers']}, window {config['window']}"
    return f"{config['layers']} layers" if "layers" in config else f"{config['rounds']} rounds"


def scaling_intro(r: Record) -> str:
    rows, d, t = r["decode"]["rows"], r["decode"], r["train"]
    configs = [row["config"] for row in rows.values()]
    return (f"Rows of width {span([c['dim'] for c in configs], 0)}, {span([c['heads'] for c in configs], 0)} heads: "
            + "; ".join(f"{name} {depth_of(row['config'])}" for name, row in rows.items())
            + f". Decoding: batch {d['batch']}, {d['timed_tokens_per_context']} timed tokens per context; training: "
            f"batch {t['shape']['batch']} × {t['shape']['seq']}, {t['step']}; {threads(r['threads'])}. Exponent b: "
            f"{r['exponent_method']}. From [`results/bench/scaling.json`](results/bench/scaling.json); "
            "`scaling.png` draws the same curves.")


def decode_lines(r: Record) -> list[str]:
    contexts = r["decode"]["contexts"]
    last = str(contexts[-1])
    columns = [left("row", lambda kv: kv[0]),
               left(f"ms per token at {' / '.join(f'{c:,}' for c in contexts)}",
                    lambda kv: " / ".join(f"{1e3 * v:.1f}" for v in kv[1]["seconds_per_token"].values())),
               Column("time exponent", lambda kv: f"{kv[1]['time_exponent']:.2f}"),
               Column(f"live state at {contexts[-1]:,} (MiB)", lambda kv: f"{kv[1]['state_bytes'][last] / MIB:.1f}"),
               Column("memory exponent", lambda kv: f"{kv[1]['memory_exponent']:.2f}")]
    return table(columns, r["decode"]["curves"].items())


def train_lines(r: Record) -> list[str]:
    """Training step time per depth, the fitted exponent, and each row over the first row at every depth."""
    rounds, curves = [str(x) for x in r["train"]["rounds"]], r["train"]["curves"]
    first = next(iter(curves))
    over = lambda kv: MISSING if kv[0] == first else " / ".join(  # noqa: E731
        f"{kv[1]['step_s'][x] / curves[first]['step_s'][x]:.2f}" for x in rounds)
    columns = [left("looped row", lambda kv: kv[0]),
               left(f"training step (ms) at R = {' / '.join(rounds)}",
                    lambda kv: " / ".join(f"{1e3 * kv[1]['step_s'][x]:.0f}" for x in rounds)),
               Column("exponent", lambda kv: f"{kv[1]['exponent']:.2f}"), left(f"÷ {first} at each R", over)]
    return table(columns, curves.items())


def scaling_block(results: Path) -> str:
    """Decoding time and live state against context, training step time against depth, from one record."""
    r = read(results, SCALING_FILE)
    if r is None:
        return block(SCALING, not_committed(SCALING_FILE) + ".", [])
    return block(SCALING, scaling_intro(r), [*decode_lines(r), "", *train_lines(r)])


Render = Callable[[Path], str]
BLOCKS: tuple[tuple[str, str, Render], ...] = tuple(
    (*markers(name), render) for name, render in ((BENCH, benchmarks_block), (PERF, performance_block),
                                                  (SCALING, scaling_block)))

__all__ = ["BENCHMARKS", "BLOCKS", "PERFORMANCE", "benchmarks_block", "performance_block", "read", "scaling_block"]
