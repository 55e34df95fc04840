"""Seed 003 feedback interval sweep (Appendix I.4): RLT-2 with B in {1, 2, 4, 8, 16, 32} and RLT-0 at one
fixed small shape, side by side.

    looped bench rlt [--dim 64] [--batch 64] [--seq 40] [--rounds 10] [--threads 1] [--compile] [--out PATH]

Measured, for every row:
  train       one step = forward, cross-entropy, backward, AdamW; one step per row per round, the order
              flipped every round so load from other jobs lands on all rows alike (bench.train.time_interleaved)
  prefill     `decode` of a prompt from a fresh state, batch 1, by prompt length (median of repeats)
  generation  one-token `decode` steps after prefilling to a context length, batch 1 (median per context)
  memory      CPU has no allocator high-water mark that can be reset per row, so training memory is counted:
              the peak of the bytes of tensor storages live at once during forward + backward (a dispatch-level
              meter, gradients included, parameters excluded), and the bytes of distinct storages autograd keeps
              for backward (saved-tensor hooks), beside parameters + gradients + AdamW moments (4 x parameter
              bytes, the same for every B).
              Inference: the bytes of the decode state (encoder KV, memory, SWA windows, feedback) at the
              largest context.
Headline: step-time ratios RLT-1 / RLT-0 (goal <= 2.0) and chunk4 / RLT-0 (goal <= 1.3), each the median over
rounds of the per-round ratio; with --compile also the same ratios between `train.compile` twins
(compiled / compiled) and against eager RLT-0 (compiled / eager), all rows interleaved in one run; and a
torch.profiler summary of an eager RLT-1 step (top operators by self CPU time).
The default shape is the CPU parity recipe's (width 64, 2+2, window 8, 64 rows of 40 positions).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..models import build_model, get_arch
from ..models.compile import compile_model
from ..io import atomic_save_figure
from .common import environment, print_table, summarize, torch_threads, write_json
from .train import make_train_step, time_interleaved

DEFAULT_OUT = Path("runs/bench/rlt.json")
INTERVALS = (1, 2, 4, 8, 16, 32)
GOALS = {"rlt1_over_rlt0": 2.0, "chunk4_over_rlt0": 1.3}
VOCAB = 277


def row_name(interval: int | None) -> str:
    return "RLT-0" if interval is None else f"B={interval}"


def build_rows(intervals=INTERVALS, *, dim=64, heads=4, ffn_dim=170, encoder_layers=2, decoder_layers=2,
               window=8, context=512, seed=0) -> dict[str, torch.nn.Module]:
    """One model per feedback interval plus RLT-0, all from the same seed (same shapes, same init draws)."""
    shape = dict(dim=dim, heads=heads, ffn_dim=ffn_dim, encoder_layers=encoder_layers,
                 decoder_layers=decoder_layers, window=window, context_length=context, vocab_size=VOCAB)
    models = {}
    for interval in (*intervals, None):
        torch.manual_seed(seed)
        arch = "rlt0" if interval is None else "rlt"
        extra = {} if interval is None else {"feedback_interval": interval}
        models[row_name(interval)] = build_model(get_arch(arch).config(**shape, **extra))
    return models


# --- measurements -------------------------------------------------------------------------------------------
def compiled_twins(models: dict) -> dict[str, torch.nn.Module]:
    """`train.compile` copies (same weights) of the headline rows RLT-0, B=1, B=4, named '<row> compiled'."""
    return {f"{name} compiled": compile_model(copy.deepcopy(models[name]))
            for name in ("RLT-0", "B=1", "B=4") if name in models}


def pair_ratio(times: dict[str, list[float]], row: str, base: str) -> float:
    """Median over rounds of row / base step time (both timed in the same round)."""
    return statistics.median(a / b for a, b in zip(times[row], times[base]))


def headline_ratios(train: dict[str, list[float]]) -> dict[str, float]:
    """RLT-1 and chunk-4 step time over RLT-0: eager / eager, and with --compile also compiled / compiled and
    compiled / eager RLT-0. The names say which."""
    ratios = {"rlt1_over_rlt0": pair_ratio(train, "B=1", "RLT-0"),
              "chunk4_over_rlt0": pair_ratio(train, "B=4", "RLT-0")}
    if "RLT-0 compiled" in train:
        ratios.update({
            "rlt1_compiled_over_rlt0_compiled": pair_ratio(train, "B=1 compiled", "RLT-0 compiled"),
            "chunk4_compiled_over_rlt0_compiled": pair_ratio(train, "B=4 compiled", "RLT-0 compiled"),
            "rlt1_compiled_over_rlt0_eager": pair_ratio(train, "B=1 compiled", "RLT-0"),
            "chunk4_compiled_over_rlt0_eager": pair_ratio(train, "B=4 compiled", "RLT-0"),
            "rlt0_compiled_over_rlt0_eager": pair_ratio(train, "RLT-0 compiled", "RLT-0")})
    return ratios


def goal_of(ratio_name: str) -> float | None:
    """The issue's bound for a headline ratio: RLT-1 <= 2.0x, chunk 4 <= 1.3x (any eager / compiled pairing)."""
    if ratio_name.startswith("rlt1_"):
        return GOALS["rlt1_over_rlt0"]
    return GOALS["chunk4_over_rlt0"] if ratio_name.startswith("chunk4_") else None


def train_times(models: dict, *, batch: int, seq: int, rounds: int, warmup: int) -> dict[str, list[float]]:
    generator = torch.Generator().manual_seed(0)
    data = torch.randint(0, VOCAB, (batch, seq + 1), generator=generator)
    steps = {name: make_train_step(model, data[:, :-1], data[:, 1:], lr=1e-4)[0] for name, model in models.items()}
    return time_interleaved(steps, pairs=rounds, warmup=warmup)


@torch.no_grad()
def prefill_times(models: dict, lengths, *, repeats: int) -> dict[str, dict[int, float]]:
    """Median seconds to prefill a prompt of each length from a fresh state (batch 1)."""
    tokens = torch.randint(0, VOCAB, (1, max(lengths)), generator=torch.Generator().manual_seed(1))
    samples = {name: {n: [] for n in lengths} for name in models}
    for r in range(repeats):
        for name in (models if r % 2 == 0 else reversed(list(models))):
            model = models[name].eval()
            for n in lengths:
                state = model.init_state(1)
                start = time.perf_counter()
                model.decode(tokens[:, :n], state)
                samples[name][n].append(time.perf_counter() - start)
    return {name: {n: statistics.median(s) for n, s in per.items()} for name, per in samples.items()}


@torch.no_grad()
def generation_times(models: dict, contexts, *, steps: int) -> tuple[dict, dict]:
    """Median seconds per generated token after prefilling to each context (batch 1), the rows' steps
    interleaved token by token; and the bytes of the decode state at the largest context."""
    tokens = torch.randint(0, VOCAB, (1, max(contexts) + steps), generator=torch.Generator().manual_seed(2))
    samples = {name: {c: [] for c in contexts} for name in models}
    state_bytes = {}
    for context in contexts:
        states = {}
        for name, model in models.items():
            states[name] = model.eval().init_state(1)
            model.decode(tokens[:, :context - 1], states[name])
        for i, t in enumerate(range(context - 1, context - 1 + steps)):
            for name in (models if i % 2 == 0 else reversed(list(models))):
                start = time.perf_counter()
                models[name].decode(tokens[:, t:t + 1], states[name])
                samples[name][context].append(time.perf_counter() - start)
        for name, model in models.items():
            tensors, _ = model.state_to_tensors(states[name])
            state_bytes[name] = sum(t.numel() * t.element_size() for t in tensors.values())
    times = {name: {c: statistics.median(s) for c, s in per.items()} for name, per in samples.items()}
    return times, state_bytes


def saved_for_backward_bytes(model, batch: int, seq: int) -> int:
    """Bytes of the distinct storages autograd saves for backward in one training forward (params excluded)."""
    data = torch.randint(0, VOCAB, (batch, seq + 1), generator=torch.Generator().manual_seed(3))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = max(storages.get(storage.data_ptr(), 0), storage.nbytes())
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(storages.values())


def training_peak_bytes(model, batch: int, seq: int) -> int:
    """Peak bytes of the tensor storages live at once during one forward + loss + backward (gradients included,
    parameters and inputs excluded), counted by the dispatch-level meter of `looped bench think`."""
    from .think import LiveTensorBytes

    data = torch.randint(0, VOCAB, (batch, seq + 1), generator=torch.Generator().manual_seed(3))
    model.train()
    model.zero_grad(set_to_none=True)
    with LiveTensorBytes() as meter:
        F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten()).backward()
    model.zero_grad(set_to_none=True)
    return meter.peak


def profile_step(model, *, batch: int, seq: int, steps: int = 2, top: int = 12) -> dict:
    """torch.profiler over `steps` training steps: operator count per step and the top operators by self CPU
    time, with their share of the total."""
    from torch.profiler import ProfilerActivity, profile

    data = torch.randint(0, VOCAB, (batch, seq + 1), generator=torch.Generator().manual_seed(4))
    step, _ = make_train_step(model, data[:, :-1], data[:, 1:], lr=1e-4)
    step()  # warm-up outside the profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
    ops = [{"op": e.key, "calls_per_step": e.count / steps, "self_ms_per_step": e.self_cpu_time_total / 1e3 / steps,
            "share": e.self_cpu_time_total / total} for e in ranked[:top]]
    calls = sum(e.count for e in events if e.key.startswith("aten::")) / steps
    kinds: dict[str, float] = {}
    for e in events:
        kind = op_kind(e.key)
        kinds[kind] = kinds.get(kind, 0.0) + e.self_cpu_time_total / total
    return {"steps": steps, "aten_calls_per_step": calls, "aten_calls_per_position": calls / seq,
            "self_cpu_ms_per_step": total / 1e3 / steps, "share_by_kind": kinds, "top_ops": ops}


COPY_OPS = {f"aten::{n}" for n in (
    "cat", "copy_", "slice", "select", "split", "split_with_sizes", "view", "stack", "index", "index_select",
    "as_strided", "transpose", "permute", "reshape", "expand", "unbind", "_to_copy", "to", "clone", "empty",
    "empty_like", "empty_strided", "zeros", "zeros_like", "new_zeros", "fill_", "zero_", "narrow", "contiguous", "t",
    "unsqueeze", "squeeze", "flatten", "roll", "detach", "_unsafe_view", "chunk", "unflatten", "alias",
    "slice_backward", "select_backward", "resize_", "lift_fresh", "set_")}


def op_kind(name: str) -> str:
    """Coarse operator classes for the profile summary (self time, so nested calls are not counted twice)."""
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"):
        return "matmul"
    if "scaled_dot_product" in name:
        return "attention kernels"
    if name.startswith("autograd::") or "Backward" in name:
        return "autograd bookkeeping"
    if name.startswith("Optimizer") or "adam" in name.lower() or "_foreach" in name:
        return "optimizer"
    if name in COPY_OPS:
        return "copies, views, allocation"
    return "elementwise and other" if name.startswith("aten::") else "other"


# --- the benchmark -------------------------------------------------------------------------------------------
def run_rlt_bench(*, intervals=INTERVALS, dim=64, heads=4, ffn_dim=170, encoder_layers=2, decoder_layers=2,
                  window=8, batch=64, seq=40, rounds=10, warmup=2, prefill_lengths=(16, 32, 64, 128, 256),
                  contexts=(16, 64, 256), generation_steps=16, prefill_repeats=3, threads: int | None = 1,
                  profile: bool = True, compile: bool = False) -> dict:
    """compile: also time `train.compile` twins of RLT-0, B=1 and B=4 in the same interleaved rounds (training
    step only; prefill, generation and memory are the eager rows')."""
    if 1 not in intervals or 4 not in intervals:
        raise ValueError("the sweep needs B = 1 and B = 4 for the headline ratios")
    context = max(max(prefill_lengths), max(contexts) + generation_steps, seq)
    with torch_threads(threads) as used_threads:
        models = build_rows(intervals, dim=dim, heads=heads, ffn_dim=ffn_dim, encoder_layers=encoder_layers,
                            decoder_layers=decoder_layers, window=window, context=context)
        timed = {**models, **compiled_twins(models)} if compile else models
        train = train_times(timed, batch=batch, seq=seq, rounds=rounds, warmup=warmup)
        memory = {name: saved_for_backward_bytes(m, batch, seq) for name, m in models.items()}
        peaks = {name: training_peak_bytes(m, batch, seq) for name, m in models.items()}
        prefill = prefill_times(models, prefill_lengths, repeats=prefill_repeats)
        generation, state_bytes = generation_times(models, contexts, steps=generation_steps)
        profiled = profile_step(models["B=1"], batch=batch, seq=seq) if profile else None
        profiled_compiled = (profile_step(timed["B=1 compiled"], batch=batch, seq=seq)
                             if profile and compile else None)
    ratios = headline_ratios(train)
    rows = {}
    for name, model in models.items():
        parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        rows[name] = {"parameters": sum(p.numel() for p in model.parameters()),
                      "train_step": summarize(train[name]),
                      "train_over_rlt0": pair_ratio(train, name, "RLT-0"),
                      "prefill_s": {str(n): s for n, s in prefill[name].items()},
                      "generation_s_per_token": {str(c): s for c, s in generation[name].items()},
                      "memory": {"peak_step_bytes": peaks[name], "saved_for_backward_bytes": memory[name],
                                 "parameters_grads_adam_bytes": 4 * parameter_bytes,
                                 "decode_state_bytes_at_max_context": state_bytes[name]}}
    return {"benchmark": "rlt_feedback_interval",
            "shape": dict(dim=dim, heads=heads, ffn_dim=ffn_dim, encoder_layers=encoder_layers,
                          decoder_layers=decoder_layers, window=window, batch=batch, seq=seq),
            "threads": used_threads, "rounds": rounds, "step": "forward+backward+AdamW",
            "memory_method": "peak_step_bytes: the most bytes of tensor storages live at once during forward + "
                             "backward (dispatch-level meter; parameters and inputs excluded, gradients included); "
                             "saved-tensor hooks: distinct non-parameter storages autograd holds for backward; "
                             "parameters+gradients+AdamW = 4 x parameter bytes; decode state = state_to_tensors bytes",
            "rows": rows,
            "compiled_rows": {name: {"train_step": summarize(times), "train_over_rlt0_eager":
                                     pair_ratio(train, name, "RLT-0")}
                              for name, times in train.items() if name.endswith(" compiled")},
            "ratios": ratios,
            "ratio_method": "median over rounds of the per-round ratio of step times (rows interleaved in one "
                            "run); '<row>_compiled' = train.compile twin with the same weights",
            "goals": {k: {"max": goal_of(k), "value": v, "met": v <= goal_of(k)}
                      for k, v in ratios.items() if goal_of(k) is not None},
            "profile_rlt1": profiled, "profile_rlt1_compiled": profiled_compiled}


def plot(result: dict, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    names = list(rows)
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    medians = [rows[n]["train_step"]["median_s"] for n in names]
    axes[0].bar(names, medians, color=["C0"] * (len(names) - 1) + ["C3"])
    axes[0].set_ylabel("training step (s, median)")
    axes[0].set_title(f"train: batch {result['shape']['batch']} x {result['shape']['seq']}")
    for ax, key, xlabel, ylabel, title in (
            (axes[1], "prefill_s", "prompt length", "ms per prompt", "prefill latency (batch 1)"),
            (axes[2], "generation_s_per_token", "context length", "ms per generated token",
             "generation time per token (batch 1)")):
        for i, name in enumerate(names):
            xs = [int(x) for x in rows[name][key]]
            ax.plot(xs, [1e3 * v for v in rows[name][key].values()], marker="o", ms=3, label=name,
                    color="C3" if name == "RLT-0" else plt.cm.viridis(i / max(1, len(names) - 2)))
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        # beside the panel: the rows' lines cross the whole panel, so a legend inside covers some of them
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), borderaxespad=0)
    for ax in axes:
        ax.grid(alpha=0.3)
    shape = result["shape"]
    counts = sorted({rows[n]["parameters"] for n in names if rows[n].get("parameters")})
    size = f", {counts[0]:,}–{counts[-1]:,} parameters" if counts else ""
    fig.suptitle(f"RLT feedback interval B vs RLT-0 (d {shape['dim']}, {shape['encoder_layers']}+"
                 f"{shape['decoder_layers']}, window {shape['window']}{size}, {result.get('threads', '?')} thread(s), "
                 "medians)", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    atomic_save_figure(fig, path)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--intervals", type=int, nargs="+", default=list(INTERVALS))
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn-dim", type=int, default=170)
    parser.add_argument("--encoder-layers", type=int, default=2)
    parser.add_argument("--decoder-layers", type=int, default=2)
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--prefill-lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--contexts", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--generation-steps", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--compile", action="store_true",
                        help="also time train.compile twins of RLT-0, B=1, B=4 side by side (training step)")
    parser.add_argument("--out", type=Path)


def main(args: argparse.Namespace) -> int:
    result = run_rlt_bench(intervals=tuple(args.intervals), dim=args.dim, heads=args.heads, ffn_dim=args.ffn_dim,
                           encoder_layers=args.encoder_layers, decoder_layers=args.decoder_layers,
                           window=args.window, batch=args.batch, seq=args.seq, rounds=args.rounds,
                           warmup=args.warmup, prefill_lengths=tuple(args.prefill_lengths),
                           contexts=tuple(args.contexts), generation_steps=args.generation_steps,
                           threads=args.threads, profile=not args.no_profile, compile=args.compile)
    result["environment"] = environment()
    path = write_json(args.out or DEFAULT_OUT, result)
    plot(result, path.with_suffix(".png"))
    rows = result["rows"]
    longest, widest = str(max(args.prefill_lengths)), str(max(args.contexts))
    print_table(["row", "parameters", "step (s)", "x RLT-0", f"prefill {longest} (ms)", f"gen @{widest} (ms/token)",
                 "peak step (MiB)", "saved for backward (MiB)"],
                [[name, f"{r['parameters']:,}", f"{r['train_step']['median_s']:.3f}", f"{r['train_over_rlt0']:.2f}",
                  f"{1e3 * r['prefill_s'][longest]:.1f}", f"{1e3 * r['generation_s_per_token'][widest]:.2f}",
                  f"{r['memory']['peak_step_bytes'] / 2**20:.1f}",
                  f"{r['memory']['saved_for_backward_bytes'] / 2**20:.1f}"] for name, r in rows.items()])
    for name, r in result["compiled_rows"].items():
        print(f"{name}: step {r['train_step']['median_s']:.3f} s, x eager RLT-0 {r['train_over_rlt0_eager']:.2f}")
    for key, goal in result["goals"].items():
        print(f"{key}: {goal['value']:.2f} (goal <= {goal['max']}, {'met' if goal['met'] else 'not met'})")
    if "rlt0_compiled_over_rlt0_eager" in result["ratios"]:
        print(f"rlt0_compiled_over_rlt0_eager: {result['ratios']['rlt0_compiled_over_rlt0_eager']:.2f}")
    if result["profile_rlt1"]:
        p = result["profile_rlt1"]
        print(f"RLT-1 step: {p['aten_calls_per_step']:,.0f} aten calls incl. nested "
              f"({p['aten_calls_per_position']:,.0f} per position); self CPU time by kind: " + ", ".join(
                  f"{k} {100 * v:.0f}%" for k, v in sorted(p["share_by_kind"].items(), key=lambda kv: -kv[1])))
        print("top ops: " + ", ".join(f"{o['op']} {100 * o['share']:.0f}%" for o in p["top_ops"][:6]))
    if result.get("profile_rlt1_compiled"):
        p = result["profile_rlt1_compiled"]
        print(f"compiled RLT-1 step: {p['aten_calls_per_step']:,.0f} aten calls, "
              f"self CPU {p['self_cpu_ms_per_step']:.0f} ms; top ops: "
              + ", ".join(f"{o['op'][:40]} {100 * o['share']:.0f}%" for o in p["top_ops"][:8]))
    print(f"wrote {path} and {path.with_suffix('.png')}")
    return 0


def register_cli(sub) -> None:
    """Standalone wiring (`looped bench` uses BENCHES in looped/bench/__init__.py instead)."""
    parser = sub.add_parser("rlt", help=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(func=main)


__all__ = ["GOALS", "INTERVALS", "add_arguments", "build_rows", "main", "plot", "run_rlt_bench"]
