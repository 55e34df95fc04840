"""Thinking deeper vs thinking longer (seed 002 §5.4, Fig. 5): memory and latency of T reasoning steps.

    looped bench think [--steps 1,2,4,...,64] [--batches 1,8,32] [--layers 24] [--out PATH]

Vertical (the depth-recurrent core): one shared block applied T times to the (B, L, d) state, `model(batch, T)`.
Horizontal chain of thought: a decoder-only Transformer of `layers` blocks (looped.models' transformer, same
width, heads and FFN) first reads the L-token prompt, then generates T thinking tokens one at a time (greedy) with
a KV cache, through the model's own `decode`. Both run in the same process, on the same inputs shape, fp32,
model.eval() and torch.no_grad().

Latency: median over `repeats` calls (after one untimed warm-up) of the whole core forward at budget T, and of
the T decoding steps of the Transformer starting from the already-read prompt (its prefill is timed separately:
both paradigms must read the prompt). Reported per query as well (divided by B).

Peak memory on CPU: `LiveTensorBytes`, a TorchDispatchMode that sees every tensor an operator returns while the
measured region runs, counts the bytes of each new storage once (views and in-place results share a storage),
and subtracts them when Python frees the storage (a weakref finalizer). Its peak is the largest sum of live
storage bytes created inside the region: activations, caches and outputs. Weights and inputs exist before the
region and are reported separately (parameter bytes). The core's footprint is parameter bytes + that peak.
For the Transformer the prompt's cache exists before the region too, so the region (T decoding steps) counts
only what thinking adds: the paper's "we count only the thinking tokens". Its KV cache grows by concatenation
(`GrowingKVCache`, as Hugging Face caches do), so the live bytes follow the tokens generated so far; the cache
bytes of the T thinking tokens are also read off the final cache tensors and checked against the formula
2 x B x T x N x d x 4 bytes (seed 002).

Goals (judged, never asserted): the core's peak at the largest T within 5 % of the smallest T at every batch size;
core latency linear in T (least-squares R^2 >= 0.98); the thinking KV cache linear in T (measured == formula).
Crossover: the T at which the thinking tokens' cache alone outgrows the core's whole footprint
(interpolated: footprint / cache bytes per token; and the first measured T past it).
"""

from __future__ import annotations

import argparse
import statistics
import weakref
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..infer.decode import SamplingPolicy, decode_loop
from ..experiments.render import fit_suptitle
from ..io import atomic_save_figure
from .common import environment, print_table, summarize, time_once, torch_threads, write_json

DEFAULT_OUT = Path("runs/bench/think.json")
DEFAULT_STEPS = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_BATCHES = (1, 8, 32)  # 128 works too (--batches 1,32,128) but takes several minutes on 2 CPU cores
FLAT_TOLERANCE = 0.05
LINEAR_R2 = 0.98
PROMPT_VOCAB = 257  # the Transformer's byte vocabulary


# ============================================================================ measuring memory


class LiveTensorBytes(TorchDispatchMode):
    """Live and peak bytes of tensor storages created while the mode is active (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._tracked: dict[int, weakref.finalize] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # An output sharing an input's storage is a view or an in-place result (e.g. t(weight)), not an allocation.
        inputs = {value.untyped_storage()._cdata for value in tree_flatten((args, kwargs))[0]
                  if isinstance(value, torch.Tensor)}
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._track(value.untyped_storage(), inputs)
        return out

    def _track(self, storage, inputs: set[int]) -> None:
        key = storage._cdata  # the C++ storage: shared by every view of it
        if key in self._tracked or key in inputs:
            return
        size = storage.nbytes()
        self.live += size
        self.peak = max(self.peak, self.live)
        self._tracked[key] = weakref.finalize(storage, self._release, key, size)

    def _release(self, key: int, size: int) -> None:
        self.live -= size
        self._tracked.pop(key, None)

    def __exit__(self, *exc):
        result = super().__exit__(*exc)
        for finalizer in list(self._tracked.values()):
            finalizer.detach()  # storages that outlive the region are no longer ours to count
        self._tracked.clear()
        return result


def parameter_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


# ============================================================================ the two paradigms


def build_core(dim: int, heads: int, ffn_dim: int, length: int, max_steps: int):
    """The sequence-task core of seed 002 (d 256 / 8 heads / FFN 1024, L 128 by default), one depth row per step."""
    from ..models import build_model
    from ..models.recurrent_depth import DepthRecurrentConfig

    config = DepthRecurrentConfig.for_task("family", dim=dim, heads=heads, ffn_dim=ffn_dim, max_length=length,
                                           depth_rows=max_steps, steps_range=[1, max_steps], dropout=0.0)
    return build_model(config).eval()


def core_inputs(batch: int, length: int, vocab: int, generator: torch.Generator):
    """[CLS] + random word tokens, every position real (no padding: the widest case)."""
    from ..data.tasks.base import ReasoningBatch

    tokens = torch.randint(3, vocab, (batch, length), generator=generator)
    tokens[:, 0] = 1  # [CLS]
    return ReasoningBatch(tokens=tokens, labels=torch.zeros(batch), padding=torch.zeros_like(tokens, dtype=torch.bool),
                          difficulty=torch.zeros(batch, dtype=torch.int64))


def build_cot(dim: int, heads: int, ffn_dim: int, layers: int, context: int):
    from ..models import build_model, get_arch

    config = get_arch("transformer").config(dim=dim, heads=heads, ffn_dim=ffn_dim, layers=layers,
                                            context_length=context, vocab_size=PROMPT_VOCAB)
    return build_model(config).eval()


class GrowingKVCache:
    """A KV cache that holds exactly the positions seen so far, growing by concatenation at every token.

    Duck-types looped.nn.KVCache for MultiHeadAttention (`length`, `append`). The preallocating KVCache would
    reserve the whole context up front, hiding the growth this benchmark measures.
    """

    def __init__(self, keys: torch.Tensor | None = None, values: torch.Tensor | None = None):
        self.keys, self.values = keys, values
        self.length = 0 if keys is None else keys.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        if self.keys is not None:
            k, v = torch.cat((self.keys, k), dim=2), torch.cat((self.values, v), dim=2)
        self.keys, self.values, self.length = k, v, k.shape[2]
        return k, v, 0

    def fork(self) -> GrowingKVCache:
        """A cache starting from this one's positions; appending to it never changes this one (cat copies)."""
        return GrowingKVCache(self.keys, self.values)

    def nbytes(self) -> int:
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes


def prefill(model, prompt: torch.Tensor):
    """Read the prompt once; returns (state holding the prompt's cache, logits of the last prompt position)."""
    from ..models.transformer import TransformerState

    state = TransformerState(batch=prompt.shape[0], caches=[GrowingKVCache() for _ in model.blocks])
    logits = model.decode(prompt, state)
    return state, logits[:, -1]


def think_longer(model, prompt_state, last_logits: torch.Tensor, steps: int):
    """Generate `steps` greedy thinking tokens after the prompt; returns the final state."""
    from ..models.transformer import TransformerState

    state = TransformerState(batch=prompt_state.batch, position=prompt_state.position,
                             caches=[cache.fork() for cache in prompt_state.caches])
    decode_loop(model, state, last_logits, steps, SamplingPolicy(temperature=0), consume_last=True)  # greedy
    return state


# ============================================================================ the benchmark


def linear_fit(xs: list[float], ys: list[float]) -> dict:
    """Least-squares y = intercept + slope x, with R^2 (1.0 for fewer than three points)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    intercept = my - slope * mx
    ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 and len(xs) > 2 else 1.0
    return {"slope": slope, "intercept": intercept, "r2": r2}


@torch.no_grad()
def measure_core(core, inputs, steps: int, repeats: int) -> dict:
    tracker = LiveTensorBytes()
    with tracker:  # doubles as the warm-up call
        core(inputs, steps)
    times = summarize([time_once(lambda: core(inputs, steps)) for _ in range(repeats)])
    return {"peak_bytes": tracker.peak, **{k: times[k] for k in ("median_s", "p10_s", "p90_s")}}


@torch.no_grad()
def measure_cot(model, prompt_state, last_logits, steps: int, repeats: int, prompt_cache_bytes: int) -> dict:
    tracker = LiveTensorBytes()
    with tracker:
        state = think_longer(model, prompt_state, last_logits, steps)
    kv_bytes = sum(cache.nbytes() for cache in state.caches) - prompt_cache_bytes
    del state
    times = summarize([time_once(lambda: think_longer(model, prompt_state, last_logits, steps))
                       for _ in range(repeats)])
    return {"peak_bytes": tracker.peak, "kv_cache_bytes": kv_bytes,
            **{k: times[k] for k in ("median_s", "p10_s", "p90_s")}}


def run_think_bench(*, dim: int = 256, heads: int = 8, ffn_dim: int = 1024, length: int = 128, layers: int = 24,
                    steps=DEFAULT_STEPS, batches=DEFAULT_BATCHES, repeats: int = 3, threads: int | None = None,
                    seed: int = 0, out: str | Path | None = DEFAULT_OUT, plot: bool = True, log=print) -> dict:
    """Measure both paradigms at every (batch, T); write JSON (and a PNG beside it) to `out` unless None."""
    steps, batches = sorted(set(int(t) for t in steps)), sorted(set(int(b) for b in batches))
    if not steps or steps[0] < 1 or not batches or batches[0] < 1 or repeats < 1:
        raise ValueError("steps, batches and repeats must be >= 1")
    with torch_threads(threads):
        torch.manual_seed(seed)
        core = build_core(dim, heads, ffn_dim, length, steps[-1])
        cot = build_cot(dim, heads, ffn_dim, layers, length + steps[-1])
        generator = torch.Generator().manual_seed(seed)
        core_runs, cot_runs, prefill_times = [], [], {}
        for batch in batches:
            inputs = core_inputs(batch, length, core.config.vocab_size, generator)
            prompt = torch.randint(0, PROMPT_VOCAB, (batch, length), generator=generator)
            with torch.no_grad():
                prefill_times[str(batch)] = summarize([time_once(lambda: prefill(cot, prompt))
                                                       for _ in range(repeats)])
                prompt_state, last_logits = prefill(cot, prompt)
            prompt_cache = sum(cache.nbytes() for cache in prompt_state.caches)
            for t in steps:
                log(f"think bench: batch {batch}, T {t}")
                core_runs.append({"batch": batch, "steps": t, **measure_core(core, inputs, t, repeats)})
                cot_runs.append({"batch": batch, "steps": t,
                                 **measure_cot(cot, prompt_state, last_logits, t, repeats, prompt_cache)})
            del prompt_state, last_logits
        env = environment()
    core_bytes, cot_params = parameter_bytes(core), sum(p.numel() for p in cot.parameters())
    for run in core_runs:
        run["footprint_bytes"] = core_bytes + run["peak_bytes"]
        run["per_query_ms"] = 1e3 * run["median_s"] / run["batch"]
    for run in cot_runs:
        run["kv_cache_bytes_formula"] = 2 * run["batch"] * run["steps"] * layers * dim * 4
        run["per_query_ms"] = 1e3 * run["median_s"] / run["batch"]
    result = {
        "bench": "think",
        "shape": {"dim": dim, "heads": heads, "ffn_dim": ffn_dim, "length": length, "layers": layers,
                  "steps": steps, "batches": batches, "repeats": repeats, "dtype": "float32"},
        "core": {"arch": "drt", "parameters": core.parameter_counts()["total"], "parameter_bytes": core_bytes,
                 "runs": core_runs},
        "cot": {"arch": "transformer", "layers": layers, "parameters": cot_params, "prefill": prefill_times,
                "runs": cot_runs},
        "crossover": crossover(core_runs, cot_runs, batches),
        "goals": goals(core_runs, cot_runs, batches),
        "method": {
            "latency": f"median of {repeats} timed calls after one warm-up; core: model(batch, T); chain of thought: "
                       "T greedy decode() steps after the prompt (prefill timed separately)",
            "memory": "LiveTensorBytes: a TorchDispatchMode summing the bytes of live tensor storages created inside "
                      "the measured region (each storage once, released when freed); peak = the largest sum. "
                      "Parameters and inputs (and the prompt's cache) predate the region",
            "footprint": "core: parameter bytes + peak activation bytes at that batch and T",
            "kv_cache": "bytes of the thinking tokens' keys and values in the final caches (grown by concatenation); "
                        "formula 2 x B x T x N x d x 4",
            "crossover": "T where the thinking KV cache alone equals the core's whole footprint",
            "mode": "model.eval(), torch.no_grad(), fp32, batch of random tokens without padding",
        },
        "environment": env,
    }
    if out is not None:
        out = Path(out)
        if plot:
            result["plot"] = str(plot_think(result, out.with_suffix(".png")))
        result["path"] = str(write_json(out, result))
    return result


def _runs_for(runs: list[dict], batch: int) -> list[dict]:
    return sorted((r for r in runs if r["batch"] == batch), key=lambda r: r["steps"])


def crossover(core_runs: list[dict], cot_runs: list[dict], batches: list[int]) -> dict:
    report = {}
    for batch in batches:
        core, cot = _runs_for(core_runs, batch), _runs_for(cot_runs, batch)
        footprint = max(r["footprint_bytes"] for r in core)
        per_token = cot[-1]["kv_cache_bytes"] / cot[-1]["steps"]
        above = [r["steps"] for r in cot if r["kv_cache_bytes"] >= footprint]
        report[str(batch)] = {
            "core_footprint_bytes": footprint,
            "kv_bytes_per_thinking_token": per_token,
            "crossover_steps": footprint / per_token if per_token else None,
            "first_measured_steps_above": above[0] if above else None,
            "kv_over_core_at_max_steps": cot[-1]["kv_cache_bytes"] / footprint,
        }
    return report


def goals(core_runs: list[dict], cot_runs: list[dict], batches: list[int]) -> dict:
    flat, after_first, linear, kv = {}, {}, {}, {}
    for batch in batches:
        core, cot = _runs_for(core_runs, batch), _runs_for(cot_runs, batch)
        first, last = core[0]["peak_bytes"], core[-1]["peak_bytes"]
        flat[str(batch)] = (last - first) / first if first else 0.0
        # From the second step on the core also holds the previous step's gate z while the next step runs (one
        # (B, L, d) tensor): a constant offset, not growth. This separates the two.
        second = core[1]["peak_bytes"] if len(core) > 1 else first
        after_first[str(batch)] = (last - second) / second if second else 0.0
        linear[str(batch)] = linear_fit([r["steps"] for r in core], [r["median_s"] for r in core])
        linear[str(batch)]["cot"] = linear_fit([r["steps"] for r in cot], [r["median_s"] for r in cot])
        kv[str(batch)] = all(r["kv_cache_bytes"] == r["kv_cache_bytes_formula"] for r in cot)
    return {
        "core_memory_flat": {"relative_change_max_vs_min_steps": flat,
                             "relative_change_max_vs_second_smallest_steps": after_first, "tolerance": FLAT_TOLERANCE,
                             "met": all(abs(v) <= FLAT_TOLERANCE for v in flat.values())},
        "core_latency_linear": {"fits": linear, "min_r2": LINEAR_R2,
                                "met": all(v["r2"] >= LINEAR_R2 for v in linear.values())},
        "kv_cache_linear": {"matches_formula": kv, "met": all(kv.values())},
    }


def plot_think(result: dict, path: Path) -> Path:
    """Fig. 5 layout: memory relative to the core's footprint (left), latency per query (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, lat) = plt.subplots(1, 2, figsize=(11, 4))
    core_runs, cot_runs = result["core"]["runs"], result["cot"]["runs"]
    for i, batch in enumerate(result["shape"]["batches"]):
        core, cot = _runs_for(core_runs, batch), _runs_for(cot_runs, batch)
        unit = core[0]["footprint_bytes"]
        xs = [r["steps"] for r in core]
        color = f"C{i}"
        mem.plot(xs, [r["footprint_bytes"] / unit for r in core], color=color, marker="o", label=f"core B={batch}")
        mem.plot(xs, [r["kv_cache_bytes"] / unit for r in cot], color=color, ls="--", marker="x",
                 label=f"CoT KV cache B={batch}")
        lat.plot(xs, [r["per_query_ms"] for r in core], color=color, marker="o", label=f"core B={batch}")
        lat.plot(xs, [r["per_query_ms"] for r in cot], color=color, ls="--", marker="x", label=f"CoT B={batch}")
    mem.axhline(1.0, color="0.5", lw=0.8)
    mem.set_xlabel("thinking steps / tokens T")
    mem.set_ylabel("memory / core footprint at T=1")
    mem.set_title(f"memory (CoT: {result['cot']['layers']} layers, thinking tokens only)", fontsize=9)
    lat.set_xlabel("thinking steps / tokens T")
    lat.set_ylabel("latency per query (ms)")
    lat.set_title("latency", fontsize=9)
    for ax in (mem, lat):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    shape, env = result["shape"], result.get("environment", {})
    fit_suptitle(fig, f"Depth-recurrent core ({result['core']['arch']}, {result['core']['parameters']:,} parameters) "
                      f"vs chain of thought ({result['cot']['arch']}, {result['cot']['parameters']:,}) at inference "
                      f"(d {shape['dim']}, {shape['dtype']}, {env.get('threads', '?')} threads, torch "
                      f"{env.get('torch', '?')}); solid: core, dashed: CoT")
    fig.tight_layout()
    atomic_save_figure(fig, path)
    return path


# ============================================================================ command line


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn-dim", type=int, default=1024)
    parser.add_argument("--length", type=int, default=128, help="prompt / input length L")
    parser.add_argument("--layers", type=int, default=24, help="depth N of the chain-of-thought Transformer")
    parser.add_argument("--steps", type=_int_list, default=list(DEFAULT_STEPS), help="comma-separated T values")
    parser.add_argument("--batches", type=_int_list, default=list(DEFAULT_BATCHES), help="comma-separated batch sizes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result path (plot beside it)")


def main(args: argparse.Namespace) -> int:
    result = run_think_bench(dim=args.dim, heads=args.heads, ffn_dim=args.ffn_dim, length=args.length,
                             layers=args.layers, steps=args.steps, batches=args.batches, repeats=args.repeats,
                             threads=args.threads, seed=args.seed, out=args.out, log=lambda m: None)
    print_summary(result)
    return 0


def print_summary(result: dict) -> None:
    shape = result["shape"]
    print(f"think bench: core d={shape['dim']} L={shape['length']} ({result['core']['parameters']:,} parameters) vs "
          f"{shape['layers']}-layer CoT Transformer, {result['environment']['threads']} thread(s)")
    rows = []
    for core, cot in zip(result["core"]["runs"], result["cot"]["runs"]):
        rows.append([core["batch"], core["steps"], core["footprint_bytes"] / 2**20, cot["kv_cache_bytes"] / 2**20,
                     core["per_query_ms"], cot["per_query_ms"]])
    print_table(["B", "T", "core MiB", "CoT KV MiB", "core ms/query", "CoT ms/query"], rows)
    for batch, entry in result["crossover"].items():
        print(f"B={batch}: the thinking KV cache passes the core's footprint at T ~ {entry['crossover_steps']:.1f}")
    g = result["goals"]
    flat = g["core_memory_flat"]
    for batch, change in flat["relative_change_max_vs_min_steps"].items():
        print(f"B={batch}: core peak at the largest T vs the smallest {100 * change:+.2f} % (vs the second smallest "
              f"{100 * flat['relative_change_max_vs_second_smallest_steps'][batch]:+.3f} %)")
    print(f"goals: core memory flat {g['core_memory_flat']['met']}, core latency linear "
          f"{g['core_latency_linear']['met']}, KV cache linear {g['kv_cache_linear']['met']}")
    if "path" in result:
        print(f"wrote {result['path']}")
