"""Training throughput of our model against a minimal reference GPT of the same shape.

One step = forward, cross-entropy, backward, AdamW step, zero_grad; tokens per step = batch * seq.
The two models are timed side by side, one step each in turn, so a burst of load from another job on
the machine slows both rather than whichever happened to be running. The headline number is
ours/reference tokens per second: the median of the per-pair ratios (robust to noise that lasts
longer than one pair) and, for comparison, the ratio of the two medians.
"""

from __future__ import annotations

import argparse
import copy
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..models.compile import compile_model
from .common import (build_lm, count_parameters, environment, print_table, summarize, time_once,
                     torch_threads, write_json)

DEFAULT_OUT = Path("runs/bench/train.json")
VOCAB = 257
TARGET_RATIO = 0.95
# The shape the throughput goal is stated for: seed 000's small budget.
GOAL_SHAPE = dict(dim=128, heads=4, layers=4, ffn_dim=512, seq=512, batch=8)


# --- the reference model ---------------------------------------------------------------------------
# Written out plainly, with nothing shared with looped.nn, so that it shows what the same arithmetic
# costs without our abstractions. Parameters are declared in the same order as our Transformer's, which
# lets `copy_weights` give both models identical weights.


class ReferenceBlock(nn.Module):
    """Pre-norm block: x + Attn(LN(x)), then x + MLP(LN(x)); causal attention, GELU MLP, all with biases."""

    def __init__(self, dim: int, heads: int, ffn_dim: int):
        super().__init__()
        self.heads = heads
        self.ln_attn = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln_mlp = nn.LayerNorm(dim)
        self.fc_in = nn.Linear(dim, ffn_dim)
        self.fc_out = nn.Linear(ffn_dim, dim)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=-1)
        # (batch, length, dim) -> (batch, heads, length, head_dim)
        q, k, v = (t.view(batch, length, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, length, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_attn(x))
        return x + self.fc_out(F.gelu(self.fc_in(self.ln_mlp(x))))


class ReferenceGPT(nn.Module):
    """Token + learned position embeddings, `layers` pre-norm blocks, final LayerNorm, bias-free head."""

    def __init__(self, dim: int, heads: int, layers: int, ffn_dim: int, context: int, vocab: int = VOCAB):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(ReferenceBlock(dim, heads, ffn_dim) for _ in range(layers))
        self.ln_final = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_final(x))


def copy_weights(source: nn.Module, target: nn.Module) -> None:
    """Copy parameters in declaration order; both models must list the same shapes in the same order."""
    src, dst = list(source.parameters()), list(target.parameters())
    shapes_src, shapes_dst = [tuple(p.shape) for p in src], [tuple(p.shape) for p in dst]
    if shapes_src != shapes_dst:
        raise RuntimeError(f"parameter layouts differ: {shapes_src} vs {shapes_dst}")
    with torch.no_grad():
        for s, d in zip(src, dst):
            d.copy_(s)


@torch.no_grad()
def max_logit_difference(ours: nn.Module, reference: nn.Module, tokens: torch.Tensor) -> float:
    """Largest |ours - reference| logit on `tokens`: evidence that the reference computes the same function."""
    return (ours(tokens) - reference(tokens)).abs().max().item()


# --- the measurement -------------------------------------------------------------------------------


def make_train_step(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *, lr: float,
                    **forward_kwargs) -> tuple[Callable[[], None], list[torch.Tensor]]:
    """A closure running one full training step, and the list it appends each step's loss to (the final
    losses are reported so a reader can see both models really trained on the same data)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses: list[torch.Tensor] = []

    def step() -> None:
        logits = model(inputs, **forward_kwargs)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    return step, losses


def time_interleaved(steps: dict[str, Callable[[], None]], *, pairs: int, warmup: int) -> dict[str, list[float]]:
    """Time one call of each step per round, `pairs` rounds; the order flips every round so that neither
    model always runs first (e.g. right after the other one has evicted the cache)."""
    names = list(steps)
    for _ in range(warmup):
        for name in names:
            steps[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(pairs):
        for name in names if i % 2 == 0 else reversed(names):
            times[name].append(time_once(steps[name]))
    return times


def run_train_bench(arch: str = "transformer", dim: int = 128, heads: int = 4, layers: int = 4, ffn_dim: int = 512,
                    seq: int = 512, batch: int = 8, steps: int = 20, warmup: int = 3, threads: int | None = None,
                    rounds: int | None = None, lr: float = 1e-4, seed: int = 0,
                    out: str | Path | None = DEFAULT_OUT, compile: bool = False) -> dict:
    """Measure training tokens/s of `arch` and of the reference; write the result to `out` (None: don't).
    compile: also time a torch.compile'd copy of ours (same weights, `train.compile`'s regions) in the same
    interleaved run, and report its speed-up over eager."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    with torch_threads(threads):
        torch.manual_seed(seed)
        ours, model_record = build_lm(arch, dim=dim, heads=heads, layers=layers, ffn_dim=ffn_dim,
                                      context_length=seq)
        reference = ReferenceGPT(dim, heads, layers, ffn_dim, seq)
        n_ours, n_ref = count_parameters(ours), count_parameters(reference)

        data = torch.randint(0, VOCAB, (batch, seq + 1), generator=torch.Generator().manual_seed(seed))
        inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

        check = {}
        if arch == "transformer":
            # The comparison is only fair if the reference does exactly the same work: same parameter
            # count, and (given the same weights) the same logits.
            if n_ours != n_ref:
                raise RuntimeError(f"parameter counts differ: ours {n_ours}, reference {n_ref}")
            copy_weights(ours, reference)
            diff = max_logit_difference(ours.eval(), reference.eval(), inputs[:, :min(seq, 64)])
            check = {"reference_max_abs_logit_diff": diff, "reference_matches_ours": diff <= 1e-4}
        ours.train()
        reference.train()

        forward_kwargs = {"rounds": rounds} if rounds is not None else {}
        ours_step, ours_losses = make_train_step(ours, inputs, targets, lr=lr, **forward_kwargs)
        ref_step, ref_losses = make_train_step(reference, inputs, targets, lr=lr)
        steps_by_name = {"ours": ours_step, "reference": ref_step}
        if compile:
            twin = copy.deepcopy(ours)
            steps_by_name["ours_compiled"] = make_train_step(compile_model(twin), inputs, targets, lr=lr,
                                                             **forward_kwargs)[0]
        times = time_interleaved(steps_by_name, pairs=steps, warmup=warmup + (2 if compile else 0))
        env = environment()

    timing = summarize_train(times, tokens_per_step=batch * seq)
    if compile:  # eager / compiled step time, pair by pair
        timing["ratio"]["compiled_over_eager_tokens_per_s"] = statistics.median(
            e / c for e, c in zip(times["ours"], times["ours_compiled"]))
    result = {
        "bench": "train",
        "shape": dict(arch=arch, dim=dim, heads=heads, layers=layers, ffn_dim=ffn_dim, seq=seq, batch=batch,
                      rounds=rounds),
        "model": model_record,
        "parameters": {"ours": n_ours, "reference": n_ref, "equal": n_ours == n_ref},
        "checks": check,
        **timing,
        "goal": train_goal(timing["ratio"]["median_of_pairs"], dim=dim, heads=heads, layers=layers,
                           ffn_dim=ffn_dim, seq=seq, batch=batch, arch=arch),
        "final_loss": {"ours": ours_losses[-1].item(), "reference": ref_losses[-1].item()},
        "method": {
            "step": "forward, cross_entropy, backward, AdamW.step, zero_grad(set_to_none=True); fp32",
            "tokens_per_step": batch * seq,
            "warmup_steps_each": warmup,
            "timed_steps_each": steps,
            "order": "interleaved one step each, order flipped every pair",
            "ratio": "ours/reference tokens/s = reference step time / ours step time",
        },
        "environment": env,
    }
    if out is not None:
        result["path"] = str(write_json(out, result))
    return result


def summarize_train(times: dict[str, list[float]], *, tokens_per_step: int) -> dict:
    """Per-model timing summaries, tokens/s, and the ours/reference throughput ratios."""
    models = {}
    for name, samples in times.items():
        stats = summarize(samples)
        stats["tokens_per_s"] = tokens_per_step / stats["median_s"]
        models[name] = stats
    pair_ratios = [r / o for o, r in zip(times["ours"], times["reference"])]
    ratio = {
        "median_of_pairs": statistics.median(pair_ratios),
        "of_medians": models["reference"]["median_s"] / models["ours"]["median_s"],
        "pairs": pair_ratios,
    }
    return {"models": models, "ratio": ratio}


def train_goal(ratio: float, *, arch: str, **shape: int) -> dict:
    """The throughput goal and whether this run says anything about it (only at the goal's shape)."""
    applies = arch == "transformer" and shape == GOAL_SHAPE
    return {
        "metric": "ours/reference training tokens/s (median of per-pair ratios)",
        "target": TARGET_RATIO,
        "at_shape": {**GOAL_SHAPE, "note": "seed 000 small budget (the 0.918M-parameter model)"},
        "applies": applies,
        "met": (ratio >= TARGET_RATIO) if applies else None,
    }


# --- command line ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", default="transformer", help="registered family-'lm' architecture")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--ffn-dim", type=int, default=512)
    parser.add_argument("--seq", type=int, default=512, help="tokens per sequence (also the context length)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    parser.add_argument("--rounds", type=int, default=None, help="depth of looped architectures")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result path")
    parser.add_argument("--compile", action="store_true",
                        help="also time a torch.compile'd copy (train.compile) beside eager")


def main(args: argparse.Namespace) -> int:
    """CLI entry: run, print the summary, return exit status 0 (the JSON holds the numbers)."""
    result = run_train_bench(arch=args.arch, dim=args.dim, heads=args.heads, layers=args.layers,
                             ffn_dim=args.ffn_dim, seq=args.seq, batch=args.batch, steps=args.steps,
                             warmup=args.warmup, threads=args.threads, rounds=args.rounds, seed=args.seed,
                             out=args.out, compile=args.compile)
    print_summary(result)
    return 0


def print_summary(result: dict) -> None:
    shape = result["shape"]
    print(f"train bench: {shape['arch']} d={shape['dim']} layers={shape['layers']} seq={shape['seq']} "
          f"batch={shape['batch']}, {result['parameters']['ours']:,} parameters, "
          f"{result['environment']['threads']} threads")
    rows = [[name, stats["median_s"] * 1e3, stats["p10_s"] * 1e3, stats["p90_s"] * 1e3, stats["tokens_per_s"]]
            for name, stats in result["models"].items()]
    print_table(["model", "median ms", "p10 ms", "p90 ms", "tokens/s"], rows)
    ratio, goal = result["ratio"], result["goal"]
    verdict = "" if goal["met"] is None else (" (goal met)" if goal["met"] else " (goal NOT met)")
    print(f"ours/reference tokens/s: {ratio['median_of_pairs']:.3f} median of pairs, "
          f"{ratio['of_medians']:.3f} ratio of medians; target >= {goal['target']}{verdict}")
    if "compiled_over_eager_tokens_per_s" in ratio:
        print(f"compiled/eager tokens/s: {ratio['compiled_over_eager_tokens_per_s']:.3f} (median of pairs)")
    if "path" in result:
        print(f"wrote {result['path']}")
