"""Per-token decoding time with the incremental state (KV caches) against recomputing the whole prefix.

Incremental: prefill a short prompt with `decode`, then feed one token at a time up to `context`
positions, timing every step. Recompute: for a new token at position t, run the full forward on
tokens[:, :t+1] and keep the last logits. Both run on the same model in the same process, interleaved
within each pass, so machine noise hits both. Recompute costs O(t) per token, so it is timed only at a
sample of prefix lengths (every `stride`-th plus the reported context lengths) to keep the run short.

The step that consumes position t attends to t+1 keys; "context length L" below means that step
(position L-1, L keys) for incremental decoding and the forward over L tokens for recompute.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from .common import build_lm, environment, print_table, summarize, torch_threads, write_json

DEFAULT_OUT = Path("runs/bench/decode.json")
VOCAB = 257
TARGET_SPEEDUP = 10.0
GOAL_CONTEXT = 512
EQUIVALENCE_TOL = 1e-4
DEFAULT_CHECKPOINTS = (64, 128, 256, 512)


def decode_pass(model, tokens: torch.Tensor, prompt: int, lengths: set[int], rounds: int | None) -> dict:
    """Prefill tokens[:, :prompt], then decode the rest one token per step, timing every step.

    Right after the step that completes a prefix of a sampled length L, the full forward over that
    prefix is timed too: the two methods then run moments apart, so a burst of load from another job
    hits both. Returns the prefill time, the step times (index i = position prompt+i), the recompute
    times by length, and the incremental logits by position for the equivalence check.
    """
    state = model.init_state(tokens.shape[0], rounds=rounds)
    start = time.perf_counter()
    prefill_logits = model.decode(tokens[:, :prompt], state)
    prefill_s = time.perf_counter() - start
    logits = {p: prefill_logits[:, p] for p in range(prompt)}
    steps, recompute = [], {}
    for t in range(prompt, tokens.shape[1]):
        start = time.perf_counter()
        out = model.decode(tokens[:, t:t + 1], state)
        steps.append(time.perf_counter() - start)
        logits[t] = out[:, 0]
        if t + 1 in lengths:
            recompute[t + 1] = time_recompute(model, tokens[:, :t + 1], rounds)
    return {"prefill_s": prefill_s, "steps": steps, "recompute": recompute, "logits": logits}


def time_recompute(model, prefix: torch.Tensor, rounds: int | None) -> float:
    """Seconds for the full forward over `prefix`, keeping only the last logits as a cache-free decoder
    would for the next token."""
    start = time.perf_counter()
    model(prefix, rounds=rounds)[:, -1]
    return time.perf_counter() - start


@torch.no_grad()
def check_equivalence(model, tokens: torch.Tensor, logits: dict, positions: list[int], rounds: int | None) -> dict:
    """Compare incremental logits at `positions` with one full forward pass over all tokens."""
    full = model(tokens, rounds=rounds)
    diff = max((logits[p] - full[:, p]).abs().max().item() for p in positions)
    return {"positions": positions, "max_abs_diff": diff, "tolerance": EQUIVALENCE_TOL,
            "equivalent": diff <= EQUIVALENCE_TOL}


def sample_lengths(context: int, stride: int, checkpoints: list[int], prompt: int) -> list[int]:
    """Every `stride`-th prefix length up to `context`, plus the reported context lengths; only lengths
    past the prompt, since recompute is timed next to the incremental step that reaches the length."""
    return sorted({n for n in range(stride, context + 1, stride) if n > prompt} | set(checkpoints))


def resolve_checkpoints(checkpoints, prompt: int, context: int) -> list[int]:
    """Reported context lengths that incremental decoding actually steps through, always incl. `context`."""
    return sorted({c for c in checkpoints if prompt < c <= context} | {context})


def per_position_medians(passes: list[list[float]]) -> list[float]:
    """Median over repeated passes of the time at each position: one slow pass does not skew a position."""
    return [statistics.median(samples) for samples in zip(*passes)]


@torch.no_grad()
def run_decode_bench(arch: str = "transformer", context: int = 512, batch: int = 1, dim: int = 128, heads: int = 4,
                     layers: int = 4, ffn_dim: int = 512, prompt: int = 16, repeats: int = 5, warmup: int = 1,
                     stride: int = 32, window: int = 16, checkpoints=DEFAULT_CHECKPOINTS, rounds: int | None = None,
                     threads: int | None = None, seed: int = 0, out: str | Path | None = DEFAULT_OUT) -> dict:
    """Measure incremental vs recompute per-token time; write the result to `out` (None: don't)."""
    if not 1 <= prompt < context:
        raise ValueError(f"need 1 <= prompt < context, got prompt {prompt}, context {context}")
    if repeats < 1 or stride < 1 or window < 1:
        raise ValueError("repeats, stride and window must be >= 1")
    checkpoints = resolve_checkpoints(checkpoints, prompt, context)
    lengths = sample_lengths(context, stride, checkpoints, prompt)
    with torch_threads(threads):
        torch.manual_seed(seed)
        model, model_record = build_lm(arch, dim=dim, heads=heads, layers=layers, ffn_dim=ffn_dim,
                                       context_length=context)
        model.eval()
        tokens = torch.randint(0, VOCAB, (batch, context), generator=torch.Generator().manual_seed(seed))

        for _ in range(warmup):
            decode_pass(model, tokens, prompt, set(lengths[:2]), rounds)
        passes = [decode_pass(model, tokens, prompt, set(lengths), rounds) for _ in range(repeats)]
        check_positions = sorted({0, prompt - 1, prompt, (prompt + context) // 2, context - 1})
        equivalence = check_equivalence(model, tokens, passes[-1]["logits"], check_positions, rounds)
        env = environment()

    incremental = per_position_medians([p["steps"] for p in passes])  # index i = position prompt + i
    recompute = {n: statistics.median(p["recompute"][n] for p in passes) for n in lengths}
    incremental_stats, recompute_stats = summarize(incremental), summarize(list(recompute.values()))
    by_context = at_context(incremental, recompute, checkpoints, prompt, window)
    result = {
        "bench": "decode",
        "shape": dict(arch=arch, context=context, batch=batch, dim=dim, heads=heads, layers=layers,
                      ffn_dim=ffn_dim, prompt=prompt, rounds=rounds),
        "model": model_record,
        "incremental": {**incremental_stats, "prefill": summarize([p["prefill_s"] for p in passes])},
        "recompute": {**recompute_stats, "lengths": lengths},
        "at_context": by_context,
        "speedup": {
            "overall": recompute_stats["median_s"] / incremental_stats["median_s"],
            "at_context": {length: entry["speedup"] for length, entry in by_context.items()},
        },
        "goal": decode_goal(by_context),
        "equivalence": equivalence,
        "method": {
            "incremental": f"prefill {prompt} tokens with decode(), then one decode() call per token up to "
                           f"position {context - 1}; per-position median over {repeats} passes; the summary "
                           "is over all decoded positions",
            "recompute": f"model(tokens[:, :L])[:, -1] timed only at sampled prefix lengths L (every {stride}th "
                         f"plus the reported context lengths), median over {repeats} passes; the summary is over "
                         "the sampled lengths",
            "at_context": f"incremental: median of the {window} steps ending at context L; recompute: the "
                          "forward over L tokens",
            "order": "within each pass, the recompute of prefix L runs right after the incremental step "
                     "that completes L",
            "mode": "model.eval(), torch.no_grad(), fp32",
        },
        "environment": env,
    }
    if out is not None:
        result["path"] = str(write_json(out, result))
    return result


def at_context(incremental: list[float], recompute: dict[int, float], checkpoints: list[int], prompt: int,
               window: int) -> dict[str, dict]:
    """Per-token times and speed-up at each reported context length L.

    A single step is too noisy to report, so the incremental time at L is the median over the `window`
    steps ending at L (contexts L-window+1 .. L), which barely differ in cost.
    """
    report = {}
    for length in checkpoints:
        last = length - 1 - prompt  # index of the step at position L-1
        steps = incremental[max(0, last - window + 1):last + 1]
        inc = statistics.median(steps)
        report[str(length)] = {"incremental_s": inc, "recompute_s": recompute[length],
                               "speedup": recompute[length] / inc, "incremental_steps": len(steps)}
    return report


def decode_goal(at: dict[str, dict]) -> dict:
    """The speed-up goal at context 512, judged only when this run reached that context."""
    applies = str(GOAL_CONTEXT) in at
    speedup = at[str(GOAL_CONTEXT)]["speedup"] if applies else None
    return {
        "metric": f"recompute / incremental per-token time at context {GOAL_CONTEXT}",
        "target": TARGET_SPEEDUP,
        "applies": applies,
        "speedup": speedup,
        "met": (speedup >= TARGET_SPEEDUP) if applies else None,
    }


# --- command line ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", default="transformer", help="registered family-'lm' architecture")
    parser.add_argument("--context", type=int, default=512, help="decode up to this many positions")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--ffn-dim", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=16, help="tokens prefilled before stepping")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes of each method")
    parser.add_argument("--stride", type=int, default=32, help="recompute is timed every stride-th length")
    parser.add_argument("--rounds", type=int, default=None, help="depth of looped architectures")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result path")


def main(args: argparse.Namespace) -> int:
    """CLI entry: run, print the summary, return exit status 0 (the JSON holds the numbers)."""
    result = run_decode_bench(arch=args.arch, context=args.context, batch=args.batch, dim=args.dim,
                              heads=args.heads, layers=args.layers, ffn_dim=args.ffn_dim, prompt=args.prompt,
                              repeats=args.repeats, stride=args.stride, rounds=args.rounds, threads=args.threads,
                              seed=args.seed, out=args.out)
    print_summary(result)
    return 0


def print_summary(result: dict) -> None:
    shape = result["shape"]
    print(f"decode bench: {shape['arch']} d={shape['dim']} layers={shape['layers']} batch={shape['batch']} "
          f"context={shape['context']}, {result['environment']['threads']} threads")
    rows = [[L, v["incremental_s"] * 1e3, v["recompute_s"] * 1e3, v["speedup"]]
            for L, v in result["at_context"].items()]
    rows.append(["all", result["incremental"]["median_s"] * 1e3, result["recompute"]["median_s"] * 1e3,
                 result["speedup"]["overall"]])
    print_table(["context", "incremental ms/token", "recompute ms/token", "speed-up"], rows)
    eq, goal = result["equivalence"], result["goal"]
    print(f"incremental == full forward: {eq['equivalent']} (max |diff| {eq['max_abs_diff']:.2e})")
    if goal["applies"]:
        print(f"speed-up at context {GOAL_CONTEXT}: {goal['speedup']:.1f}x; target >= {goal['target']:.0f}x "
              f"({'met' if goal['met'] else 'NOT met'})")
    if "path" in result:
        print(f"wrote {result['path']}")
