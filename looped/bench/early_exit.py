"""Early exit against fixed depth when decoding a batch: mean executed depth, the FLOP saving it implies, and
tokens/s, at batch 1 / 8 / 32 side by side in one run. Any row with a per-position exit: the looped rows of seed
000 (their rule: total variation), exit_gate_loop (the gate's cumulative exit probability q) and prelude_coda
(KL convergence); the threshold is in the model's own rule.

    looped bench exit --threshold T [--run RUN | --arch A --dim D --ffn-dim F] [--rounds R] [--batches 1 8 32]
                      [--prompt P] [--steps N] [--repeats K] [--threads 1] [--out PATH]

Text: the run's held-out stream (rows taken at evenly spaced offsets), or random ids for a random-init model.
Each pass prefills `prompt` tokens (untimed), then decodes `steps` more per row, teacher-forced, timed as a whole,
in one of three modes:
  fixed      one `decode` call per token, every round (no threshold)
  lockstep   one `decode` call per token with the exit threshold: exited rows skip the block (loop_exit.py)
  stream     `stream_decode`: every block call runs each row at its own round and token (loop_stream.py; the
             seed-000 rows only)
The modes take turns pass by pass, the order rotated every repeat, so machine noise hits all; reported times are
medians over `repeats` passes.

  mean executed depth   rounds a decoded token refined, averaged over the batch's decoded tokens
  FLOP saving           1 - (head + depth x round) / (head + R x round), per token from the model's ledger at
                        the mean number of keys (looped/models/ledger.py): what the depth alone implies
  with upkeep           the same, also counting what the rule still computes for an exited token (its key/value
                        projection, once for a static block input, else with its block input every skipped
                        round) and the extra readouts that decide the exits (one head per executed round). For
                        exit_gate_loop and prelude_coda (an exited token still runs all but the last block of a
                        stack, and prelude_coda's exit reads the coda every iteration) it is counted instead:
                        FlopCounterMode over one fixed and one lockstep pass (math attention), their ratio
  time saving           1 - t_exit / t_fixed for each exit mode: the FLOP saving's counterpart in time (the
                        tokens/s gain t_fixed / t_stream - 1 is reported as well)
  bits/byte             of the decoded tokens in each mode, and of every row decoded alone with exit (the
                        single-row rule): batching must not change what is predicted

Goal (issue 30): at batch 8, time saving >= 70 % of the FLOP saving, with bits/byte within 1 % of single-row exit;
judged for each exit mode.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from ..models.base import CausalLM
from ..models.ledger import linear_flops
from .common import build_lm, environment, print_table, summarize, torch_threads, write_json

DEFAULT_OUT = Path("runs/bench/exit.json")
GOAL_BATCH, GOAL_RATIO, GOAL_BPB = 8, 0.70, 0.01
BATCHES = (1, 8, 32)
MODES = ("fixed", "lockstep", "stream")
EXIT_MODES = MODES[1:]


def seed_000_row(model) -> bool:
    """A looped row of seed 000: it streams (loop_stream.py) and its exit upkeep has a formula (loop_upkeep)."""
    return hasattr(model, "stream_decode")


def modes_of(model) -> tuple[str, ...]:
    return MODES if seed_000_row(model) else MODES[:2]


def load_model(run: str | None, seed: int, shape: dict):
    """(model in eval mode, record, held-out stream or None): a trained run, or a random-init `shape["arch"]`."""
    if run is None:
        torch.manual_seed(seed)
        model, record = build_lm(shape.pop("arch"), **shape)
        return model.eval(), {**record, "source": f"random init, seed {seed}"}, None
    from ..data import load_streams
    from ..train.checkpoint import load_model as load_checkpoint, resolve_checkpoint

    folder = resolve_checkpoint(run)
    model, config = load_checkpoint(folder)
    if getattr(config.task, "kind", "lm") != "lm":
        raise ValueError(f"{run}: trained on task kind {config.task.kind}, not on text")
    record = {"arch": model.arch_name, "source": str(folder), "config": dataclasses.asdict(config.model)}
    return model, record, torch.from_numpy(load_streams(config.data).heldout.astype("int64"))


def bench_tokens(stream: torch.Tensor | None, rows: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """(rows, length) ids: windows of the held-out stream at evenly spaced offsets, or random ids."""
    if stream is None:
        return torch.randint(0, vocab, (rows, length), generator=torch.Generator().manual_seed(seed))
    if len(stream) < rows * length:
        raise ValueError(f"the held-out stream has {len(stream)} symbols, fewer than {rows} rows x {length}")
    step = len(stream) // rows
    return torch.stack([stream[i * step:i * step + length] for i in range(rows)])


def decode_pass(model, tokens: torch.Tensor, prompt: int, rounds: int, mode: str, threshold: float,
                around=None) -> dict:
    """Prefill tokens[:, :prompt], then time the decoding of every later token but the last, teacher-forced:
    "fixed" and "lockstep" (exit) make one `decode` call per token for the whole batch, "stream" lets every row
    run at its own pace (stream_decode). Returns the seconds, the NLL (nats) of every decoded prediction
    (batch, steps) and the rounds each used (None at fixed depth). `around`: a context entered for the timed
    part (a FLOP counter)."""
    state = model.init_state(tokens.shape[0], rounds=rounds, exit_threshold=None if mode == "fixed" else threshold)
    model.decode(tokens[:, :prompt], state)
    steps = tokens.shape[1] - 1 - prompt
    start = time.perf_counter()
    with around if around is not None else contextlib.nullcontext():
        if mode == "stream":
            logits, used = model.stream_decode(state, tokens[:, prompt], steps,
                                               lambda rows, index, _: tokens[rows, prompt + index])
        else:
            logits = torch.stack([model.decode(tokens[:, t:t + 1], state)[:, 0]
                                  for t in range(prompt, prompt + steps)], 1)
            used = torch.cat(state.rounds_used[1:], 1) if mode == "lockstep" else None  # [0] is the prefill
    seconds = time.perf_counter() - start
    nll = F.cross_entropy(logits.float().transpose(1, 2), tokens[:, prompt + 1:], reduction="none")
    return {"seconds": seconds, "nll": nll, "used": used}


def measure_batch(model, tokens: torch.Tensor, prompt: int, rounds: int, threshold: float, repeats: int) -> dict:
    """Every mode in turn (the order rotated every repeat) after one untimed pass of each."""
    modes = modes_of(model)
    for mode in modes:
        decode_pass(model, tokens, prompt, rounds, mode, threshold)
    times, last = {mode: [] for mode in modes}, {}
    for i in range(repeats):
        for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
            last[mode] = decode_pass(model, tokens, prompt, rounds, mode, threshold)
            times[mode].append(last[mode]["seconds"])
    best = modes[-1]  # the exit mode the goal is judged on first: stream where there is one
    if not torch.equal(last[best]["used"], last["lockstep"]["used"]):
        raise RuntimeError("stream_decode and lockstep decoding disagree on the rounds used")
    return {"times": times, "nll": {m: p["nll"] for m, p in last.items()}, "used": last["lockstep"]["used"],
            "paired": [f / e for f, e in zip(times["fixed"], times[best])]}


def counted_flops(model, tokens: torch.Tensor, prompt: int, rounds: int, threshold: float) -> dict[str, float]:
    """FLOPs per decoded token of one fixed and one lockstep pass, as FlopCounterMode counts them (the math
    attention backend: the fused CPU kernel is invisible to it)."""
    out = {}
    for mode in MODES[:2]:
        counter = FlopCounterMode(display=False)
        with sdpa_kernel(SDPBackend.MATH):
            decode_pass(model, tokens, prompt, rounds, mode, threshold, around=counter)
        out[mode] = counter.get_total_flops() / (tokens.shape[0] * (tokens.shape[1] - 1 - prompt))
    return out


def exit_flops(model, rounds: int, used: torch.Tensor, keys: int, counted: dict | None = None) -> dict:
    """Per-token FLOPs at fixed depth and with exit (module docstring), from the ledger at `keys` keys; `counted`
    (counted_flops) gives the upkeep of the families without a formula for it."""
    ledger = model.ledger(keys, rounds)
    outside, per_round = sum(ledger.outside.values()), sum(ledger.rounds[0].values())
    depth = used.float().mean().item()
    fixed, ideal = outside + rounds * per_round, outside + depth * per_round
    if counted is None:
        with_upkeep = ideal + loop_upkeep(model, rounds, used) + (depth - 1) * ledger.outside["head"]
    else:
        with_upkeep = fixed * counted["lockstep"] / counted["fixed"]
    return {"keys": keys, "fixed_per_token": fixed, "exit_per_token": ideal, "exit_with_upkeep_per_token": with_upkeep,
            "saving": 1 - ideal / fixed, "saving_with_upkeep": 1 - with_upkeep / fixed,
            **({} if counted is None else {"counted_per_token": counted})}


def loop_upkeep(model, rounds: int, used: torch.Tensor) -> float:
    """Per-token FLOPs a seed-000 row still spends on its exited tokens: keys/values (and the round's extras) once
    per token that exited before the last round for a static block input, else every round it skipped."""
    c = model.config
    per_skip = linear_flops(c.dim, 2 * c.dim) + sum(model.round_extra_flops().values())
    if model.static_block_input:
        return (used < rounds).float().mean().item() * per_skip
    return (rounds - used.float().mean().item()) * per_skip


def bits_per_byte(nll: torch.Tensor) -> float:
    return nll.double().mean().item() / math.log(2)


def batch_entry(model, measured: dict, single_nll: torch.Tensor, rounds: int, prompt: int, steps: int,
                counted: dict | None = None) -> dict:
    """One batch size's numbers: times and tokens/s per mode, depth, FLOPs, time saving against FLOP saving (the
    streaming exit against fixed depth, where there is one; lockstep too), bits/byte."""
    batch, modes = single_nll.shape[0], modes_of(model)
    median = {mode: statistics.median(measured["times"][mode]) for mode in modes}
    flops = exit_flops(model, rounds, measured["used"], prompt + (steps + 1) // 2, counted)
    saving = {mode: 1 - median[mode] / median["fixed"] for mode in modes[1:]}
    bpb = {mode: bits_per_byte(measured["nll"][mode]) for mode in modes}
    bpb["exit_single_row"] = bits_per_byte(single_nll)
    bpb["relative_difference"] = {mode: abs(bpb[mode] - bpb["exit_single_row"]) / bpb["exit_single_row"]
                                  for mode in modes[1:]}
    return {"batch": batch,
            **{mode: {**summarize(measured["times"][mode]), "tokens_per_s": batch * steps / median[mode]}
               for mode in modes},
            "mean_depth": measured["used"].float().mean().item(), "rounds": rounds,
            "depth_histogram": torch.bincount(measured["used"].flatten(), minlength=rounds + 1)[1:].tolist(),
            "flops": flops, "time_saving": saving,
            "tokens_per_s_gain": median["fixed"] / median[modes[-1]] - 1,
            "paired_speedup_median": statistics.median(measured["paired"]),
            "time_saving_over_flop_saving": {mode: saving[mode] / flops["saving"] if flops["saving"] > 0 else None
                                             for mode in modes[1:]},
            "bits_per_byte": bpb}


@torch.no_grad()
def run_exit_bench(threshold: float, *, run: str | None = None, arch: str = "anchored_loop", dim: int = 256,
                   heads: int = 4, ffn_dim: int = 1024, rounds: int | None = None, context: int = 128,
                   batches=BATCHES, prompt: int = 16, steps: int = 48, repeats: int = 5, threads: int | None = 1,
                   seed: int = 0, out: str | Path | None = DEFAULT_OUT) -> dict:
    """Measure fixed depth against early exit at each batch size (module docstring); write JSON to `out`."""
    check_options(threshold, batches, prompt, steps, repeats)
    with torch_threads(threads) as used_threads:
        shape = dict(arch=arch, dim=dim, heads=heads, ffn_dim=ffn_dim, context_length=context)
        model, record, stream = load_model(run, seed, shape)
        if type(model).forward_early_exit is CausalLM.forward_early_exit:
            raise ValueError(f"{model.arch_name}: `looped bench exit` measures rows with a per-position exit (the "
                             f"looped rows of seed 000, exit_gate_loop, prelude_coda)")
        rounds = model.resolve_rounds(rounds)
        if prompt + steps + 1 > model.config.context_length:
            raise ValueError(f"prompt {prompt} + steps {steps} + 1 > context_length {model.config.context_length}")
        tokens = bench_tokens(stream, max(batches), prompt + steps + 1, model.config.vocab_size, seed)
        # the single-row rule: every row decoded alone, once (untimed)
        single = torch.cat([decode_pass(model, tokens[i:i + 1], prompt, rounds, "lockstep", threshold)["nll"]
                            for i in range(max(batches))])
        entries = {}
        for b in batches:
            counted = None if seed_000_row(model) else counted_flops(model, tokens[:b], prompt, rounds, threshold)
            entries[str(b)] = batch_entry(model, measure_batch(model, tokens[:b], prompt, rounds, threshold, repeats),
                                          single[:b], rounds, prompt, steps, counted)
        env = environment()
    result = {"bench": "exit", "model": record, "environment": env,
              "shape": dict(threshold=threshold, rounds=rounds, prompt=prompt, steps=steps, batches=list(batches),
                            repeats=repeats, threads=used_threads),
              "batches": entries, "goal": exit_goal(entries),
              "method": {"timed": f"{steps} tokens per row, teacher-forced, after an untimed prefill of {prompt}; "
                                  f"median of {repeats} passes per mode, the modes taking turns",
                         "modes": {"fixed": "one decode call per token, every round", "lockstep": "one decode call "
                                   "per token with the exit threshold (exited rows skip the block)", "stream":
                                   "stream_decode: each row at its own round and token in every block call"},
                         "goal": "time saving = 1 - t_exit / t_fixed for each exit mode, against the FLOP saving "
                                 "of the mean depth",
                         "mode": "model.eval(), torch.no_grad(), fp32", "text": f"random ids, seed {seed}"
                         if run is None else "held-out stream of the run, rows at evenly spaced offsets"}}
    if out is not None:
        result["path"] = str(write_json(out, result))
    return result


def check_options(threshold: float, batches, prompt: int, steps: int, repeats: int) -> None:
    if not threshold >= 0:
        raise ValueError(f"--threshold must be >= 0, got {threshold}")
    if not batches or min(batches) < 1:
        raise ValueError(f"--batches must be positive sizes, got {list(batches)}")
    if prompt < 1 or steps < 1 or repeats < 1:
        raise ValueError(f"--prompt, --steps and --repeats must be >= 1, got {prompt}, {steps}, {repeats}")


def exit_goal(entries: dict) -> dict:
    """Issue 30's goal, judged for each exit mode where the run measured batch 8."""
    entry = entries.get(str(GOAL_BATCH))
    if entry is None:
        return {"applies": False, "batch": GOAL_BATCH}
    ratio = entry["time_saving_over_flop_saving"]  # one entry per exit mode the model has
    close = {mode: entry["bits_per_byte"]["relative_difference"][mode] <= GOAL_BPB for mode in ratio}
    return {"applies": True, "batch": GOAL_BATCH, "target_ratio": GOAL_RATIO, "ratio": ratio,
            "bits_per_byte_within": GOAL_BPB, "bits_per_byte_close": close,
            "met": {mode: ratio[mode] is not None and ratio[mode] >= GOAL_RATIO and close[mode] for mode in ratio}}


# --- command line ----------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threshold", type=float, required=True,
                        help="early-exit threshold in the row's rule (total variation, gate q, or KL)")
    parser.add_argument("--run", default=None, help="a trained run or checkpoint (default: a random-init model)")
    parser.add_argument("--arch", default="anchored_loop", help="row of a random-init model (with an exit)")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn-dim", type=int, default=1024)
    parser.add_argument("--context", type=int, default=128, help="context length of a random-init model")
    parser.add_argument("--rounds", type=int, default=None, help="depth (default: as trained)")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--prompt", type=int, default=16, help="tokens prefilled before timing")
    parser.add_argument("--steps", type=int, default=48, help="tokens decoded per timed pass")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes of each mode")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result path")


def main(args: argparse.Namespace) -> int:
    result = run_exit_bench(args.threshold, run=args.run, arch=args.arch, dim=args.dim, heads=args.heads,
                            ffn_dim=args.ffn_dim, rounds=args.rounds, context=args.context, batches=args.batches,
                            prompt=args.prompt, steps=args.steps, repeats=args.repeats, threads=args.threads,
                            seed=args.seed, out=args.out)
    print_summary(result)
    return 0


def print_summary(result: dict) -> None:
    shape = result["shape"]
    print(f"exit bench: {result['model']['arch']} ({result['model']['source']}), threshold {shape['threshold']}, "
          f"{shape['rounds']} rounds, {shape['steps']} tokens per pass, {shape['threads']} thread(s)")
    exits = [mode for mode in EXIT_MODES if mode in next(iter(result["batches"].values()))]
    rows = [[b, e["mean_depth"], e["flops"]["saving"], e["fixed"]["tokens_per_s"],
             *[e[mode]["tokens_per_s"] for mode in exits], *[e["time_saving"][mode] for mode in exits],
             e["bits_per_byte"][exits[-1]], e["bits_per_byte"]["exit_single_row"]]
            for b, e in result["batches"].items()]
    print_table(["batch", "depth", "FLOP saving", "fixed tok/s", *[f"{mode} tok/s" for mode in exits],
                 *[f"{mode} saves" for mode in exits], "bpb exit", "bpb single-row"], rows)
    goal = result["goal"]
    if goal["applies"]:
        for mode in goal["ratio"]:
            ratio = goal["ratio"][mode]
            print(f"batch {goal['batch']}, {mode}: time saving / FLOP saving "
                  f"{'n/a' if ratio is None else f'{ratio:.2f}'} (goal >= {goal['target_ratio']}), bits/byte within "
                  f"{goal['bits_per_byte_within']:.0%} of single-row: {goal['bits_per_byte_close'][mode]} "
                  f"({'met' if goal['met'][mode] else 'NOT met'})")
    if "path" in result:
        print(f"wrote {result['path']}")
