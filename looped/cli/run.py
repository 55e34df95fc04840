"""`looped train | eval | generate | plot | params | quickstart`: train a run, score it, sample it, compare runs.

    looped train CONFIG.yaml [--set train.max_steps=100] [--out runs/NAME] [--resume]
    looped eval RUN [--rounds R] [--exit-threshold 0.01]      # held-out NLL / PPL / bits per byte, as JSON
    looped generate RUN --prompt "And God said" [--temperature 0.8 --top-p 0.95]
    looped quickstart                                         # ~5 min on 2 idle CPU cores (README)
    looped quickstart --task parity|s5|graph|logic            # a family's point in a table (cli/quickstart.py)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ..io import atomic_write_text
from ..train.checkpoint import resolve_checkpoint
from ..train.config import QUICKSTART
from .common import add_set, names_a_config, print_json

# --- commands -------------------------------------------------------------------------------------------
def cmd_train(args) -> int:
    from ..config import to_dict
    from ..train import Trainer, load_run_config

    from ..hub import is_hf_id, parse_hf_id

    out = None
    if args.config and is_hf_id(args.config[0]):  # continue a checkpoint pushed with its trainer state
        if not (args.resume and len(args.config) == 1):
            raise ValueError(f"{args.config[0]}: a pushed checkpoint is trained further with --resume (one config)")
        from ..train.pretrained import seed_resume

        out = Path(args.out or Path("runs") / parse_hf_id(args.config[0])[0].split("/")[1])
        args.config = [str(seed_resume(args.config[0], out))]
    if args.config:
        config = load_run_config(args.config, args.set)
    elif args.resume and args.out:  # the run's own config (+ --set for the keys a resume may change)
        config = load_run_config(None, args.set, base=to_dict(run_config(args.out)))
    else:
        raise ValueError("give config file(s), or --out RUN --resume to continue a run with its own config")
    out = out or Path(args.out or Path("runs") / "_".join(Path(c).stem for c in args.config))
    if args.stop_after is not None and args.stop_after < 1:
        raise ValueError(f"--stop-after: the number of updates must be >= 1, got {args.stop_after}")
    summary = Trainer(config, out, resume=args.resume, progress=not args.no_progress).run(stop_after=args.stop_after)
    if os.environ.get("RANK", "0") == "0":
        report_training(out, config, {"run": str(out), **summary}, as_json=args.json)
    return 0


def report_training(out: Path, config, summary: dict, as_json: bool) -> None:
    """The trainer's summary as JSON in RUN/summary.json (and on stdout with --json, for scripts); otherwise the
    held-out score in words beside the compressors, and a warning when the end is worse than the best."""
    from ..train.summary import summary_lines

    text = json.dumps(summary, indent=2)
    atomic_write_text(out / "summary.json", text + "\n")
    if as_json:
        print(text)
        return
    lines, warning = summary_lines(out, config)
    print("\n".join(lines))
    if warning:
        print(f"looped: warning: {warning}", file=sys.stderr)


def run_config(run: str):
    """The RunConfig of a run folder's newest complete checkpoint."""
    from ..train import checkpoint as ckpt

    last = ckpt.find_checkpoint(Path(run) / "checkpoints" / "last")
    if last is None:
        raise ckpt.CheckpointError(f"{run}: no checkpoint to resume in {Path(run) / 'checkpoints' / 'last'}")
    return ckpt.read_config(last)


# Commands that score a run trained on a task other than next-byte prediction ("lm").
OWN_COMMANDS = {"sequence": "`looped lengths RUN` (accuracy by length) or `looped continue RUN`",
                "reasoning": "`looped think RUN --input ...` or `looped reproduce drt`"}


def load_lm_run(run: str, which: str | None, command: str):
    """(model, RunConfig, checkpoint folder) of a language-model run; other runs are refused, pointing to the
    command that scores them (eval would otherwise score a parity model on KJV bytes)."""
    from ..train import load_model

    folder = resolve_checkpoint(run, which)
    model, config = load_model(folder)
    kind = getattr(config.task, "kind", "lm")
    if kind != "lm":
        name = getattr(config.task, "name", kind)
        raise ValueError(f"{run} was trained on the {name} task (task.kind {kind}), not on text; `looped {command}` "
                         f"scores text models: use {OWN_COMMANDS.get(kind, 'the command of its task')}")
    return model, config, folder


def _eval_config(args):
    from ..config import from_dict, merge, parse_overrides, to_dict
    from ..train import RunConfig

    model, config, folder = load_lm_run(args.run, args.which, "eval")
    changes = parse_overrides(args.set)
    wrong = [f"{section}.{key}" for section, values in changes.items() if section != "data"
             for key in (values if isinstance(values, dict) else [""])]
    if wrong:  # model / train / optim keys would be ignored: the weights fix them
        raise ValueError(f"--set {wrong[0]}: eval takes only data.* keys (what is scored); the checkpoint fixes "
                         f"the rest (see --rounds, --batch-size, --exit-threshold)")
    if changes:  # e.g. --set data.path=other.txt to score another held-out stream
        config = from_dict(RunConfig, merge(to_dict(config), changes))
    return model, config, folder


def cmd_eval(args) -> int:
    from ..eval import evaluate_lm
    from ..eval.lm import merge_scores

    model, config, folder = _eval_config(args)
    sources = lm_sources(config, args.file, args.set)
    results = []
    for label, parts, unit in sources:
        start = time.perf_counter()
        result = merge_scores([evaluate_lm(model, blocks, batch_size=args.batch_size, max_batches=args.eval_batches,
                                           rounds=args.rounds, unit=unit, progress=not args.no_progress,
                                           exit_threshold=args.exit_threshold, by_position=args.by_position)
                               for blocks in parts])
        check_finite_score(result, folder)
        # the depth that was scored and the one the model was trained at (both null for a fixed-depth model)
        depth = {"rounds": args.rounds or model.default_rounds, "trained_rounds": model.default_rounds}
        results.append({**result, **depth, "checkpoint": str(folder), **label,
                        "seconds": round(time.perf_counter() - start, 2)})
    print_json(results if args.file and len(results) > 1 else results[0], args.out)
    return 0


def check_finite_score(result: dict, folder) -> None:
    """A NaN / inf score is not a result (finite weights can still overflow, e.g. a checkpoint saved one update
    before a divergence): a one-line error naming the checkpoint instead of a JSON of NaN and exit status 0."""
    import math

    if not math.isfinite(result["nll"]):
        raise ValueError(f"{folder}: the held-out NLL is {result['nll']} (not finite): this checkpoint's weights "
                         f"overflow; evaluate an earlier checkpoint (e.g. --which best)")


def lm_sources(config, files: list[str] | None, set_items: list[str] = ()) -> list[tuple[dict, list, str]]:
    """What `eval`, `depth` and `lens` score: (label naming it, parts = block tensors, unit) per source. Each of
    `files` whole (file_parts), else the run's held-out stream, labelled with its corpus and the rule that split
    it from the training text (a single file's held-out share is not the whole file)."""
    from ..data import load_streams, to_blocks

    if files:
        if set_items:
            raise ValueError("--file scores whole files; it takes no --set data.* keys")
        return [({"file": str(path)}, file_parts(path, config), "byte") for path in files]
    streams = load_streams(config.data)
    if any(item.startswith("data.path=") for item in set_items):  # a held-out share, not the whole file
        print(f"looped: note: scoring {streams.split_rule}; --file scores a whole file", file=sys.stderr)
    blocks = to_blocks(streams.heldout, config.data.block_size, name=f"{streams.name} held-out")
    return [({"corpus": streams.name, "heldout": streams.split_rule}, [blocks], streams.unit)]


def file_parts(path: str, config) -> list:
    """A whole text file as the run's blocks: the complete blocks (num_blocks, block_size), then the tail of
    fewer than block_size bytes as one shorter block (1, tail), so no part of the file is left out (each block's
    first byte is context, as in training). Byte-level runs only."""
    import torch

    from ..data import bytes_to_stream
    from ..data.corpora import read_bytes

    if config.data.corpus == "wikitext103":
        raise ValueError("--file: this run reads WikiText symbols (bytes plus a row separator), not plain files")
    stream = torch.from_numpy(bytes_to_stream(read_bytes(path)).astype("int64"))
    size = config.data.block_size
    whole = len(stream) // size * size
    if len(stream) < 2:
        raise ValueError(f"{path}: fewer than 2 bytes, nothing to score")
    parts = [stream[:whole].view(-1, size)] if whole else []
    return parts + ([stream[whole:][None]] if len(stream) - whole >= 2 else [])


MAX_NEW_TOKENS = 1_000_000  # generate's output is held whole: a typo of 10**12 would run until memory is gone


def cmd_generate(args) -> int:
    import torch

    from ..infer import decode_byte_text, encode_byte_text, generate

    # One token at a time is a chain of tiny kernels: waking a second thread costs more than it saves
    # (looped bench decode: ~1.5-2x faster per token with one thread on 2 cores).
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    if args.max_new_tokens is not None and args.max_new_tokens > MAX_NEW_TOKENS:
        raise ValueError(f"--max-new-tokens: at most {MAX_NEW_TOKENS:,} (the text is kept in memory and printed at "
                         f"the end), got {args.max_new_tokens:,}")
    model, _, _ = load_lm_run(args.run, args.which, "generate")
    prompt = encode_byte_text(args.prompt)
    room = max(model.config.context_length - prompt.shape[1], model.config.context_length // 2)
    ids = generate(model, prompt, args.max_new_tokens if args.max_new_tokens is not None else room,
                   temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                   rounds=args.rounds)
    print(decode_byte_text(ids[0].tolist()))
    return 0


def cmd_plot(args) -> int:
    from ..eval.curves import plot_runs

    runs = [Path(r) for r in args.runs]
    out = Path(args.out) if args.out else default_plot_path(runs)
    print(plot_runs(runs, out, metrics=args.metrics, x=args.x, smooth=args.smooth, labels=args.labels))
    print(f"wrote {out}")
    return 0


def default_plot_path(runs: list[Path]) -> Path:
    """One run's curves belong to the run (RUN/curves.png); a comparison belongs to none of its runs, so it is
    written to the current directory (./curves.png)."""
    if len(runs) > 1:
        return Path("curves.png")
    return (runs[0] if runs[0].is_dir() else runs[0].parent) / "curves.png"


def cmd_params(args) -> int:
    import dataclasses

    import torch

    from ..models import build_model, get_arch
    from ..models.budget import solve_ffn
    from ..train import load_run_config

    run_config = None
    if names_a_config(args.target):
        run_config = load_run_config(args.target, args.set)
        model_config = run_config.model
    else:  # an architecture name with its defaults (+ --set model.x=...)
        from ..config import parse_overrides

        changes = parse_overrides(args.set).get("model", {})
        if not isinstance(changes, dict):  # `--set model=3`
            raise ValueError(f"model: expected a mapping, got {changes!r} (set a key inside it: model.dim=64)")
        model_config = get_arch(args.target).config(**changes)
    if args.solve_ffn is not None:
        if args.solve_ffn < 1:
            raise ValueError(f"--solve-ffn: a parameter count must be >= 1, got {args.solve_ffn}")
        fields = {k: v for k, v in dataclasses.asdict(model_config).items() if k != "arch"}
        ffn_dim, total = solve_ffn(model_config.arch, args.solve_ffn, **fields)
        print(json.dumps({"arch": model_config.arch, "target": args.solve_ffn, "ffn_dim": ffn_dim, "total": total,
                          "difference": total - args.solve_ffn}, indent=2))
        return 0
    with torch.device("meta"):  # counting needs no memory, even at 100M parameters
        model = build_model(model_config)
    counts = model.parameter_counts()
    print_params(model, counts, run_config, args)
    return 0


STATE_CONTEXT = 1024  # `looped params` reports the decoding state here besides the config's own context


def print_params(model, counts: dict[str, int], run_config, args) -> None:
    """Parameter counts and the compute ledger (looped/models/ledger.py), as text or (--json) JSON."""
    from ..models.ledger import model_ledger, render

    config = model.config
    if args.context is not None:
        context = args.context
    elif run_config is not None and run_config.task.kind == "lm":
        context = run_config.data.block_size - 1  # the inputs of one training block
    else:
        context = getattr(config, "context_length", None) or config.max_length
    for name in ("context", "batch"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")
    batch = args.batch or (run_config.train.batch_size if run_config is not None else 1)
    # an architecture without a ledger (a plugin) still gets its parameter counts
    ledger = model_ledger(model, context, args.depth) if hasattr(model, "ledger") else None
    missing = f"{config.arch} does not describe its compute (no `ledger` method)"
    states = (STATE_CONTEXT,) if ledger is not None and ledger.state_per_token else ()
    if args.json:
        out = {"arch": config.arch, **counts}
        out["ledger"] = ledger.to_dict(batch=batch, state_contexts=states) if ledger else {"error": missing}
        print(json.dumps(out, indent=2))
        return
    print(f"{config.arch}: {counts['total']:,} parameters")
    for name, count in counts.items():
        if name != "total":
            print(f"  {name:<28} {count:>12,}")
    print(render(ledger, batch=batch, state_contexts=states) if ledger else f"no compute ledger: {missing}")


# The text quickstart's time: 4.1-4.7 min measured on 2 idle cores (README, sessions 8-9); ~14 with one torch
# thread is issue 29's measurement, not repeated here.
TEXT_QUICKSTART_MINUTES = (5, 14)


def cmd_quickstart(args) -> int:
    """Train the default model on the embedded KJV corpus, score the held-out books, print a sample; with
    --task, a family's small recipe and the table that shows its point (cli/quickstart.py)."""
    if args.task:
        from .quickstart import cmd_task_quickstart

        return cmd_task_quickstart(args)
    return text_quickstart(args)


def check_sample_options(args) -> None:
    """The text quickstart's sample: a prompt of at least one byte and a length >= 0."""
    if not args.prompt:
        raise ValueError("--prompt: the sample needs a prompt of at least one character")
    if args.sample_bytes < 0:
        raise ValueError(f"--sample-bytes must be >= 0, got {args.sample_bytes}")


def text_quickstart(args) -> int:
    import torch

    from ..config import from_dict, merge
    from ..data import load_streams, to_blocks
    from ..eval import evaluate_lm
    from ..eval.compressors import compressor_bits_per_byte, format_rates
    from ..infer import decode_byte_text, encode_byte_text, generate
    from ..train import RunConfig, Trainer, load_model
    from ..train import checkpoint as ckpt
    from ..experiments.quickstart import MeasuredEta, eta_line
    from .quickstart import default_out, overrides, resume_command

    config = from_dict(RunConfig, merge(QUICKSTART, overrides(args)))
    check_sample_options(args)  # before minutes of training, not after them
    out = default_out(args)
    threads = config.train.threads or torch.get_num_threads()
    print(eta_line("(KJV bytes)", *TEXT_QUICKSTART_MINUTES, threads))
    start = time.perf_counter()
    if not ckpt.run_finished(out):
        log = MeasuredEta()
        log.trainer = Trainer(config, out, resume="auto", progress=not args.no_progress, log=log,
                              resume_command=resume_command(args, out))
        log.trainer.run()
    model, config = load_model(resolve_checkpoint(str(out)))
    streams = load_streams(config.data)
    result = evaluate_lm(model, to_blocks(streams.heldout, config.data.block_size, name="kjv held-out"),
                         batch_size=16, unit=streams.unit)
    sample = generate(model, encode_byte_text(args.prompt), args.sample_bytes, temperature=0.8, top_k=0, top_p=0.95,
                      seed=0)
    elapsed = time.perf_counter() - start
    compressors = compressor_bits_per_byte(bytes(streams.heldout.tolist()))
    print(f"\nheld-out ({result['targets']:,} bytes of the KJV held-out books): "
          f"{result['bits_per_byte']:.4f} bits/byte (NLL {result['nll']:.4f} nats, PPL {result['ppl']:.3f}); "
          f"{elapsed / 60:.1f} min")
    print(f"the same books compressed: {format_rates(compressors)} bits/byte")
    result["compressors_bits_per_byte"] = compressors
    print(f"sample (prompt {args.prompt!r}, T=0.8, top-p 0.95, seed 0):\n{decode_byte_text(sample[0].tolist())}")
    record = json.dumps({**result, "minutes": elapsed / 60, "torch_threads": threads,
                         "load_average_at_end": round(os.getloadavg()[0], 1)}, indent=2)
    atomic_write_text(out / "quickstart.json", record)
    if args.record:
        atomic_write_text(Path(args.record), record + "\n")
    return 0


# --- parser -----------------------------------------------------------------------------------------------
def add_commands(sub) -> None:
    """Add train, eval, generate, plot, params and quickstart to the `looped` sub-commands."""
    for add in (_add_train, _add_eval_and_generate, _add_plot, _add_params, _add_quickstart):
        add(sub)


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train from YAML config(s) (works under torchrun too)")
    p.add_argument("config", nargs="*", help="YAML files, merged left to right (none with --resume: the run's own)")
    add_set(p)
    p.add_argument("--out", help="run folder (default runs/<config name>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest checkpoint (--set may change the budget, "
                        "logging, evaluation/checkpoint cadence, threads)")
    p.add_argument("--stop-after", type=int, help="stop after this many updates in total (as if killed)")
    p.add_argument("--json", action="store_true",
                   help="print the trainer's JSON summary (always written to RUN/summary.json) instead of the "
                        "held-out score in words")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_train)


def _add_eval_and_generate(sub) -> None:
    for name, func, help_ in (("eval", cmd_eval, "held-out NLL / PPL / bits per byte (seed 000 eq. 9), as JSON"),
                              ("generate", cmd_generate, "sample text from a checkpoint")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("run", help="run folder or checkpoint folder")
        p.add_argument("--which", choices=["last", "best"], help="checkpoint of a run folder (default: train.select)")
        p.add_argument("--rounds", type=int, help="test-time rounds for looped models")
        p.set_defaults(func=func)
        if name == "eval":
            add_set(p)
            p.add_argument("--eval-batches", type=int, default=0, help="0 = the whole held-out stream")
            p.add_argument("--exit-threshold", type=float,
                           help="looped rows: early exit once a position's distribution moves < this (TV); "
                                "exit_gate_loop: once its cumulative exit probability exceeds this")
            p.add_argument("--batch-size", type=int, default=16)
            p.add_argument("--by-position", action="store_true",
                           help="also report the score by target position (buckets 1, 2-3, 4-7, ...)")
            p.add_argument("--file", nargs="+", metavar="PATH",
                           help="score the whole of each text file instead of the run's held-out stream")
            p.add_argument("--out", help="also write the JSON here")
            p.add_argument("--no-progress", action="store_true")
        else:
            p.add_argument("--prompt", default="\n")
            p.add_argument("--max-new-tokens", type=int, help="default: fill the context")
            p.add_argument("--temperature", type=float, default=1.0)
            p.add_argument("--top-k", type=int, default=0)
            p.add_argument("--top-p", type=float, default=1.0)
            p.add_argument("--seed", type=int, default=0)
            p.add_argument("--threads", type=int, default=1, help="torch threads while decoding (default 1)")


def _add_plot(sub) -> None:
    p = sub.add_parser("plot", help="training curves of one or more runs side by side (PNG + text summary)")
    p.add_argument("runs", nargs="+", help="run folders (or their metrics.jsonl files)")
    p.add_argument("--metrics", nargs="+", help="default: loss, val_loss and the run's headline score")
    p.add_argument("--x", default="step", choices=["step", "targets", "flops", "seconds"],
                   help="x axis (default step; flops: cumulative training FLOPs, LM runs; seconds: training wall "
                        "time, evaluations included, over every process of a resumed run)")
    p.add_argument("--smooth", type=float, default=0.6, help="EMA weight for the training loss, 0 = raw (default 0.6)")
    p.add_argument("--labels", nargs="+", help="legend names, one per run (default: folder names)")
    p.add_argument("--out", help="PNG path (default: RUN/curves.png for one run, ./curves.png for several)")
    p.set_defaults(func=cmd_plot)


def _add_params(sub) -> None:
    p = sub.add_parser("params", help="parameter counts and the compute ledger: FLOPs by part and round, "
                                      "training FLOPs per update, decoding-state bytes")
    p.add_argument("target", help="a YAML config or an architecture name")
    p.add_argument("--solve-ffn", type=int, metavar="COUNT",
                   help="print the ffn_dim whose total parameter count is closest to COUNT")
    p.add_argument("--context", type=int, help="tokens per sequence the ledger is for (default: a "
                   "config's training block inputs, else the model's context length)")
    p.add_argument("--depth", type=int, help="rounds / steps (default: the trained depth)")
    p.add_argument("--batch", type=int, help="sequences per update for the training FLOPs "
                   "(default: a config's train.batch_size, else 1)")
    p.add_argument("--json", action="store_true", help="print JSON (counts and ledger)")
    add_set(p)
    p.set_defaults(func=cmd_params)


def _add_quickstart(sub) -> None:
    p = sub.add_parser("quickstart", help="train, evaluate and sample the default model on the embedded corpus; "
                                          "--task: a family's point in minutes")
    p.add_argument("--task", choices=["parity", "s5", "graph", "logic"],
                   help="instead of text: RLT-1 vs a Transformer beyond the trained lengths (parity, s5) or the "
                        "reasoning core's accuracy by difficulty x thinking steps (graph, logic)")
    p.add_argument("--out", help="run folder (default runs/quickstart, with --task runs/quickstart_TASK)")
    p.add_argument("--record", metavar="FILE", help="also write the result JSON here "
                                                    "(e.g. results/quickstart/parity.json)")
    p.add_argument("--prompt", default="And God said")
    p.add_argument("--sample-bytes", type=int, default=300)
    p.add_argument("--seed", type=int, help="training seed of every model it trains (default: the recipe's, 42); "
                                            "the run folder defaults to runs/quickstart[_TASK]_seedN")
    p.add_argument("--no-progress", action="store_true")
    add_set(p)
    p.set_defaults(func=cmd_quickstart)
