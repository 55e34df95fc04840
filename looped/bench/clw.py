"""Seed 000 rows side by side: training step time of all seven rows at a budget's shape, and decoding speed.

    looped bench clw [--budget small|medium] [--seq S] [--batch B] [--steps N] [--out PATH]

Every row is built with its solved widths (looped.experiments.clw) and stepped in turn, one step each per
round with the order flipped every round, so machine noise lands on all rows alike. The headline is the
workspace / anchored step-time ratio (median over rounds of the per-round ratio); goal <= 1.10.
At the larger budget (101.71M parameters) a step is forward + backward only (no AdamW state: seven
optimizers would not fit next to the models here), with a reduced batch and length.
Decoding: prefill a prompt, then one token per `decode` call to `context`, against recomputing the prefix.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..experiments import clw
from ..models import build_model
from .common import environment, print_table, summarize, torch_threads, write_json
from .decode import decode_pass
from .train import make_train_step, time_interleaved

DEFAULT_OUT = Path("runs/bench/clw.json")
GOAL_RATIO = 1.10
DECODE_GOAL = 0.8  # workspace / anchored decoding tokens per second


def build_rows(budget: str) -> dict[str, torch.nn.Module]:
    solved = clw.solve_budget(budget)
    torch.manual_seed(0)
    return {row: build_model(clw.get_config(budget, row, solved[row][0])) for row in clw.ROWS}


def forward_backward(model, inputs, targets):
    def step() -> None:
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        loss.backward()
        model.zero_grad(set_to_none=True)
    return step


def run_clw_train_bench(budget: str = "small", seq: int = 512, batch: int = 8, steps: int = 12, warmup: int = 2,
                        optimizer: bool = True, threads: int | None = None) -> dict:
    with torch_threads(threads) as used_threads:
        models = build_rows(budget)
        data = torch.randint(0, 256, (batch, seq + 1))
        inputs, targets = data[:, :-1], data[:, 1:]
        step_fns = {row: (make_train_step(m, inputs, targets, lr=1e-4)[0] if optimizer
                          else forward_backward(m, inputs, targets)) for row, m in models.items()}
        times = time_interleaved(step_fns, pairs=steps, warmup=warmup)
    per_round = [w / a for w, a in zip(times["workspace"], times["anchored_loop"])]
    rows = {row: {"parameters": sum(p.numel() for p in models[row].parameters()), **summarize(t),
                  "tokens_per_s": batch * seq / statistics.median(t)} for row, t in times.items()}
    ratio = statistics.median(per_round)
    return {"benchmark": "clw_train", "budget": budget, "shape": {"seq": seq, "batch": batch},
            "step": "forward+backward+AdamW" if optimizer else "forward+backward", "threads": used_threads,
            "rows": rows, "workspace_over_anchored": {"median_of_rounds": ratio,
                                                       "ratio_of_medians": rows["workspace"]["median_s"] /
                                                       rows["anchored_loop"]["median_s"]},
            "relative_to_plain": {row: r["median_s"] / rows["plain"]["median_s"] for row, r in rows.items()},
            "goal": {"workspace_over_anchored_max": GOAL_RATIO, "met": ratio <= GOAL_RATIO}}


@torch.no_grad()
def run_clw_decode_bench(context: int = 512, prompt: int = 64, threads: int | None = 1,
                         sample_every: int = 64, repeats: int = 3) -> dict:
    """Per-token incremental decoding vs recomputing the prefix, for every small-budget row; then the
    workspace against the anchored loop with their decode steps interleaved token by token."""
    out = {}
    with torch_threads(threads) as used_threads:
        models = build_rows("small")
        tokens = torch.randint(0, 256, (1, context))
        lengths = set(range(prompt + sample_every, context + 1, sample_every)) | {context}
        for row, model in models.items():
            model.eval()
            result = decode_pass(model, tokens, prompt, lengths, None)
            step = statistics.median(result["steps"])
            recompute = result["recompute"]
            full = model(tokens)
            diff = max((result["logits"][p] - full[:, p]).abs().max().item()
                       for p in (prompt, context // 2, context - 1))
            out[row] = {"incremental_ms_per_token": 1e3 * step, "tokens_per_s": 1 / step,
                        "recompute_ms_at_context": 1e3 * recompute[context],
                        "speedup_at_context": recompute[context] / result["steps"][-1],
                        "speedup_median_step": recompute[context] / step,
                        "max_logit_difference": diff}
        pair = {row: models[row] for row in ("anchored_loop", "workspace")}
        side_by_side = interleaved_decode_times(pair, tokens, prompt, repeats)
        kernels = {row: decode_kernel_counts(model, tokens, prompt) for row, model in pair.items()}
    ratios = [a / w for a, w in zip(side_by_side["anchored_loop"], side_by_side["workspace"])]
    ratio = statistics.median(ratios)
    return {"benchmark": "clw_decode", "context": context, "prompt": prompt, "threads": used_threads, "rows": out,
            "workspace_over_anchored_tokens_per_s": {
                "median_of_token_pairs": ratio, "pairs": len(ratios),
                "ms_per_token": {row: 1e3 * statistics.median(t) for row, t in side_by_side.items()},
                "method": f"both rows prefill {prompt} tokens, then decode one token per call to {context}, "
                          f"alternating rows token by token, {repeats} passes; ratio = anchored / workspace "
                          "step time per token, median over all pairs",
                "goal_min": DECODE_GOAL, "met": ratio >= DECODE_GOAL,
                "operator_calls_per_token": kernels}}


# Operators that only make views, allocate or dispatch to another listed operator: not kernels of their own.
NON_KERNEL_OPS = {"view", "as_strided", "slice", "select", "t", "transpose", "unsqueeze", "squeeze", "expand",
                  "reshape", "resolve_conj", "_unsafe_view", "unflatten", "empty", "empty_strided", "detach",
                  "alias", "permute", "split", "chunk", "unbind", "contiguous", "linear", "matmul", "layer_norm",
                  "softmax", "to", "_to_copy", "scaled_dot_product_attention", "lift_fresh", "split_with_sizes",
                  "narrow", "empty_like"}


def decode_kernel_counts(model, tokens: torch.Tensor, prompt: int, steps: int = 16) -> dict:
    """Where a decoded token's time goes at batch 1: aten operator calls per token, all of them and the
    ones that run a kernel (NON_KERNEL_OPS excluded), from the profiler over `steps` decode calls."""
    from torch.profiler import profile

    steps = min(steps, tokens.shape[1] - prompt - 1)
    state = model.init_state(1)
    model.decode(tokens[:, :prompt], state)
    model.decode(tokens[:, prompt:prompt + 1], state)  # the first call builds per-state caches
    with profile() as prof:
        for t in range(prompt + 1, prompt + 1 + steps):
            model.decode(tokens[:, t:t + 1], state)
    counts = {e.key[len("aten::"):]: e.count for e in prof.key_averages() if e.key.startswith("aten::")}
    kernels = {op: n / steps for op, n in sorted(counts.items()) if op not in NON_KERNEL_OPS}
    return {"aten_calls": sum(counts.values()) / steps, "kernel_calls": sum(kernels.values()),
            "kernel_calls_by_op": kernels}


def interleaved_decode_times(models: dict, tokens: torch.Tensor, prompt: int, repeats: int) -> dict[str, list]:
    """Seconds per decode call of each row, the rows alternating token by token (order flipped every token)."""
    times = {row: [] for row in models}
    for _ in range(repeats):
        states = {row: model.init_state(1) for row, model in models.items()}
        for row, model in models.items():
            model.decode(tokens[:, :prompt], states[row])
        for t in range(prompt, tokens.shape[1]):
            for row in (list(models) if t % 2 else list(reversed(models))):
                start = time.perf_counter()
                models[row].decode(tokens[:, t:t + 1], states[row])
                times[row].append(time.perf_counter() - start)
    return times


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", choices=["small", "medium"], default="small")
    parser.add_argument("--seq", type=int, help="default 512 (small) / 64 (medium)")
    parser.add_argument("--batch", type=int, help="default 8 (small) / 1 (medium)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--no-decode", action="store_true", help="skip the decoding benchmark")
    parser.add_argument("--decode-only", action="store_true", help="only the decoding benchmark (small budget)")
    parser.add_argument("--out", type=Path)


def main(args: argparse.Namespace) -> int:
    if args.decode_only:
        return decode_only(args.out or DEFAULT_OUT.with_name("clw_decode.json"))
    small = args.budget == "small"
    train = run_clw_train_bench(args.budget, seq=args.seq or (512 if small else 64),
                                batch=args.batch or (8 if small else 1), steps=args.steps, optimizer=small,
                                threads=args.threads)
    result = {"train": train, "environment": environment()}
    out = Path(args.out or DEFAULT_OUT.with_name(f"clw_{args.budget}.json"))
    if small and not args.no_decode:
        result["decode"] = run_clw_decode_bench()
    elif out.exists() and "decode" in (earlier := json.loads(out.read_text())):
        # --no-decode re-measures training only: keep the file's decoding section, marked as the earlier run's
        result["decode"] = {**earlier["decode"], "from_earlier_run": earlier.get("environment", True)}
    path = write_json(out, result)
    print_table(["row", "parameters", "median step (s)", "tokens/s", "x plain"],
                [[row, f"{r['parameters']:,}", f"{r['median_s']:.3f}", f"{r['tokens_per_s']:,.0f}",
                  f"{train['relative_to_plain'][row]:.2f}"] for row, r in train["rows"].items()])
    ratio = train["workspace_over_anchored"]["median_of_rounds"]
    print(f"workspace / anchored step time: {ratio:.3f} (goal <= {GOAL_RATIO})")
    if "decode" in result:
        print_decode(result["decode"])
    print(f"wrote {path}")
    return 0


def decode_only(out: Path) -> int:
    decode = run_clw_decode_bench()
    path = write_json(out, {"decode": decode, "environment": environment()})
    print_decode(decode)
    print(f"wrote {path}")
    return 0


def print_decode(decode: dict) -> None:
    print_table(["row", "ms/token", "tokens/s", "speed-up vs recompute at context"],
                [[row, f"{r['incremental_ms_per_token']:.2f}", f"{r['tokens_per_s']:,.0f}",
                  f"{r['speedup_at_context']:.1f}x"] for row, r in decode["rows"].items()])
    side = decode.get("workspace_over_anchored_tokens_per_s")
    if side:
        print(f"workspace / anchored decoding tokens/s, side by side: {side['median_of_token_pairs']:.3f} "
              f"(goal >= {DECODE_GOAL}, {'met' if side['met'] else 'not met'})")
        calls = side.get("operator_calls_per_token", {})
        print("kernel calls per token: " + ", ".join(f"{row} {c['kernel_calls']:.0f}" for row, c in calls.items()))
