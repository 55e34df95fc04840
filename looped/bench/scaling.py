"""How cost grows: decoding time per token and decoding-state memory against context length, and training
step time against depth, with a fitted growth exponent for every curve.

    looped bench scaling [--contexts 256 512 ... 8192] [--rounds 1 2 4 8 16] [--threads 1] [--out PATH]

Decoding (batch 1, eval, no_grad): every row's state is filled to context L - 1 by prefill (chunks of at
most 512 tokens), then `steps` single-token decode calls are timed, the rows interleaved token by token so
machine noise hits all of them; the state keeps growing into the next context. State memory is the bytes
of what a state holds live at position L (KV caches up to their length, windows, running sums, the
feedback register), not the buffers preallocated for the whole context.
Rows: the plain Transformer, the anchored loop (a looped row with a KV cache per round), the causal
workspace, RLT-1 and RLT-2 (B = 4).
Training: one step (forward, cross-entropy, backward, AdamW) of the looped rows built for R rounds, all
(row, R) pairs interleaved.
Exponent: the slope b of log y = a + b log x by least squares (b = 1: linear growth, b = 0: flat).
Without --out the result goes to results/bench/scaling.json only if that file does not exist yet.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
from pathlib import Path

import torch

from ..models import build_model, get_arch
from ..nn import KVCache
from ..io import atomic_save_figure
from .common import environment, print_table, summarize, torch_threads, write_json
from .train import make_train_step, time_interleaved

DEFAULT_OUT = Path("results/bench/scaling.json")
VOCAB = 257
CONTEXTS = (256, 512, 1024, 2048, 4096, 8192)
ROUNDS = (1, 2, 4, 8, 16)
PREFILL_CHUNK = 512
WIDTH = dict(dim=128, heads=4)
LOOP = dict(WIDTH, ffn_dim=512, rounds=4)
RLT_SHAPE = dict(WIDTH, ffn_dim=341, encoder_layers=2, decoder_layers=2, window=8, vocab_size=VOCAB)
DECODE_ROWS = {  # row name -> (architecture, config fields)
    "transformer": ("transformer", dict(WIDTH, layers=4, ffn_dim=512)),
    "anchored_loop": ("anchored_loop", LOOP),
    "workspace": ("workspace", LOOP),
    "RLT-1": ("rlt", dict(RLT_SHAPE, feedback_interval=1)),
    "RLT-2 (B=4)": ("rlt", dict(RLT_SHAPE, feedback_interval=4)),
}
TRAIN_ROWS = {"anchored_loop": "anchored_loop", "workspace": "workspace"}
TRAIN_SHAPE = dict(LOOP, seq=128, batch=4)


def growth_exponent(xs, ys) -> float:
    """Least-squares slope of log y against log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def live_state_bytes(state) -> int:
    """Bytes a decode state holds live: caches up to their length (a window cache: its kept positions)."""
    def size(obj) -> int:
        if isinstance(obj, KVCache):
            n = obj.length if obj.window is None else obj.kept
            return 2 * obj.keys[:, :, :n].numel() * obj.keys.element_size()
        if isinstance(obj, torch.Tensor):
            return obj.numel() * obj.element_size()
        if isinstance(obj, (list, tuple)):
            return sum(size(item) for item in obj)
        return 0
    return sum(size(getattr(state, f.name)) for f in dataclasses.fields(state))


def build(arch: str, fields: dict, context: int, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(get_arch(arch).config(**fields, context_length=context))


@torch.no_grad()
def decode_curves(contexts, steps: int) -> dict[str, dict]:
    """Per row: median seconds per decoded token and live state bytes at each context."""
    top = max(contexts) + steps
    models = {name: build(arch, fields, top).eval() for name, (arch, fields) in DECODE_ROWS.items()}
    states = {name: model.init_state(1) for name, model in models.items()}
    tokens = torch.randint(0, VOCAB, (1, top), generator=torch.Generator().manual_seed(1))
    curves = {name: {"seconds_per_token": {}, "state_bytes": {}} for name in models}
    for context in contexts:
        for name, model in models.items():
            state = states[name]
            while state.position < context - 1:  # prefill up to L - 1 in bounded chunks
                end = min(context - 1, state.position + PREFILL_CHUNK)
                model.decode(tokens[:, state.position:end], state)
        samples = {name: [] for name in models}
        for i in range(steps):
            for name in (list(models) if i % 2 == 0 else list(reversed(models))):
                state = states[name]
                position = state.position
                start = time.perf_counter()
                models[name].decode(tokens[:, position:position + 1], state)
                samples[name].append(time.perf_counter() - start)
                if position == context - 1:  # the state now holds exactly L positions
                    curves[name]["state_bytes"][str(context)] = live_state_bytes(state)
        for name in models:
            curves[name]["seconds_per_token"][str(context)] = statistics.median(samples[name])
    for curve in curves.values():
        curve["time_exponent"] = growth_exponent(contexts, curve["seconds_per_token"].values())
        curve["memory_exponent"] = growth_exponent(contexts, curve["state_bytes"].values())
    return curves


def training_curves(rounds, pairs: int, warmup: int) -> dict[str, dict]:
    """Per looped row: median training-step seconds at each depth R."""
    shape = {k: v for k, v in TRAIN_SHAPE.items() if k not in ("seq", "batch", "rounds")}
    data = torch.randint(0, VOCAB, (TRAIN_SHAPE["batch"], TRAIN_SHAPE["seq"] + 1),
                         generator=torch.Generator().manual_seed(2))
    step_fns = {}
    for name, arch in TRAIN_ROWS.items():
        for r in rounds:
            model = build(arch, {**shape, "rounds": r}, TRAIN_SHAPE["seq"]).train()
            step_fns[(name, r)] = make_train_step(model, data[:, :-1], data[:, 1:], lr=1e-4)[0]
    times = time_interleaved(step_fns, pairs=pairs, warmup=warmup)
    curves = {}
    for name in TRAIN_ROWS:
        per = {str(r): summarize(times[(name, r)]) for r in rounds}
        curves[name] = {"step_s": {r: s["median_s"] for r, s in per.items()}, "samples": per,
                        "exponent": growth_exponent(rounds, [per[str(r)]["median_s"] for r in rounds])}
    return curves


def run_scaling_bench(*, contexts=CONTEXTS, rounds=ROUNDS, steps: int = 8, pairs: int = 5, warmup: int = 1,
                      threads: int | None = 1) -> dict:
    if len(contexts) < 2 or len(rounds) < 2:
        raise ValueError("need at least two contexts and two depths to fit a growth exponent")
    with torch_threads(threads) as used:
        decode = decode_curves(sorted(contexts), steps)
        train = training_curves(sorted(rounds), pairs, warmup)
        env = environment()
    return {"bench": "scaling", "threads": used,
            "decode": {"rows": {name: {"arch": arch, "config": fields} for name, (arch, fields) in DECODE_ROWS.items()},
                       "contexts": sorted(contexts), "timed_tokens_per_context": steps, "batch": 1,
                       "curves": decode},
            "train": {"shape": TRAIN_SHAPE, "rounds": sorted(rounds), "pairs": pairs, "curves": train,
                      "step": "forward + cross-entropy + backward + AdamW"},
            "exponent_method": "least-squares slope of log y on log x",
            "environment": env}


def plot(result: dict, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    contexts = result["decode"]["contexts"]
    for name, curve in result["decode"]["curves"].items():
        axes[0].plot(contexts, [1e3 * v for v in curve["seconds_per_token"].values()], marker="o", ms=3,
                     label=f"{name} (b={curve['time_exponent']:.2f})")
        axes[1].plot(contexts, [v / 2**20 for v in curve["state_bytes"].values()], marker="o", ms=3,
                     label=f"{name} (b={curve['memory_exponent']:.2f})")
    rounds = result["train"]["rounds"]
    for name, curve in result["train"]["curves"].items():
        axes[2].plot(rounds, [1e3 * v for v in curve["step_s"].values()], marker="o", ms=3,
                     label=f"{name} (b={curve['exponent']:.2f})")
    labels = (("context length", "ms per decoded token (batch 1)", "decoding time"),
              ("context length", "MiB live in the decode state", "decoding state memory"),
              ("rounds R", "ms per training step", "training step vs depth"))
    for ax, (xlabel, ylabel, title) in zip(axes, labels):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(f"How cost grows (d {result['train']['shape']['dim']} rows{model_sizes(result)}; log-log; "
                 f"b = fitted exponent; {result.get('threads', '?')} thread(s), medians)", fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, Path(path))
    return Path(path)


def model_sizes(result: dict) -> str:
    """', 379,520–968,544 parameters' of the decoded rows (counted on the meta device from their configs), or
    nothing for a record without them."""
    from ..eval.plot_labels import parameter_count

    rows = result["decode"].get("rows", {}).values()
    counts = [n for n in (parameter_count({"arch": r["arch"], **r["config"]}) for r in rows) if n]
    return f", {min(counts):,}–{max(counts):,} parameters" if counts else ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--contexts", type=int, nargs="+", default=list(CONTEXTS))
    parser.add_argument("--rounds", type=int, nargs="+", default=list(ROUNDS))
    parser.add_argument("--steps", type=int, default=8, help="decode tokens timed at each context")
    parser.add_argument("--pairs", type=int, default=5, help="timed training steps per (row, rounds)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help=f"JSON path (the PNG goes beside it); default {DEFAULT_OUT}, "
                                                 "written only when that file does not exist yet")


def main(args: argparse.Namespace) -> int:
    out = args.out
    if out is None and DEFAULT_OUT.exists():
        print(f"{DEFAULT_OUT} exists (a committed result); pass --out PATH to write a new run")
        return 2
    result = run_scaling_bench(contexts=tuple(args.contexts), rounds=tuple(args.rounds), steps=args.steps,
                               pairs=args.pairs, threads=args.threads)
    path = write_json(out or DEFAULT_OUT, result)
    plot(result, path.with_suffix(".png"))
    print_summary(result)
    print(f"wrote {path} and {path.with_suffix('.png')}")
    return 0


def print_summary(result: dict) -> None:
    contexts = [str(c) for c in result["decode"]["contexts"]]
    curves = result["decode"]["curves"]
    print_table(["row", *(f"ms/tok @{c}" for c in contexts), "time b", f"state MiB @{contexts[-1]}", "memory b"],
                [[name, *(f"{1e3 * c['seconds_per_token'][x]:.2f}" for x in contexts), f"{c['time_exponent']:.2f}",
                  f"{c['state_bytes'][contexts[-1]] / 2**20:.2f}", f"{c['memory_exponent']:.2f}"]
                 for name, c in curves.items()])
    rounds = [str(r) for r in result["train"]["rounds"]]
    print_table(["row", *(f"ms/step R={r}" for r in rounds), "exponent b"],
                [[name, *(f"{1e3 * c['step_s'][r]:.1f}" for r in rounds), f"{c['exponent']:.2f}"]
                 for name, c in result["train"]["curves"].items()])


__all__ = ["add_arguments", "growth_exponent", "live_state_bytes", "main", "plot", "run_scaling_bench"]
