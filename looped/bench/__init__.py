"""Benchmarks of speed, memory and training behaviour: one per `looped bench NAME`, and `replot`.

BENCHES below holds them (train, decode, ddp, rlt, think, clw, exit, scaling; `looped bench NAME --help` lists a
benchmark's options); `looped bench replot NAME FILE.json` draws a written record's figure again.

Each benchmark writes a JSON record (default runs/bench/<name>.json: the committed results/bench files are
only replaced when --out names them) and prints a short summary.
The CLI wires these in with `register_cli(subparsers)` and calls `args.func(args)`; `cli(argv)` runs the
same commands standalone (`python -c "import looped.bench as b; b.cli(['train'])"`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import clw, ddp, decode, early_exit, rlt, scaling, think, train
from .decode import run_decode_bench
from .train import run_train_bench


@dataclass(frozen=True)
class Bench:
    """One benchmark as the CLI sees it: help text, its options, and its runner."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    main: Callable[[argparse.Namespace], int]  # prints a summary, writes JSON, returns an exit status
    plot: Callable[[dict, Path], Path] | None = None  # draws a written JSON record again (`looped bench replot`)


BENCHES: dict[str, Bench] = {
    "train": Bench("training tokens/s of a model vs a minimal reference GPT", train.add_arguments, train.main),
    "decode": Bench("per-token decoding time: incremental state vs recomputing the prefix",
                    decode.add_arguments, decode.main),
    "ddp": Bench("DDP loss curve against one process at the same global batch", ddp.add_arguments, ddp.main),
    "rlt": Bench("seed 003: feedback interval B sweep vs RLT-0 (step time, prefill, generation, memory, profile)",
                 rlt.add_arguments, rlt.main, rlt.plot),
    "think": Bench("seed 002: depth-recurrent core vs horizontal chain of thought (peak memory, latency vs T)",
                   think.add_arguments, think.main, think.plot_think),
    "clw": Bench("seed 000 rows side by side: training step time and decoding speed", clw.add_arguments, clw.main),
    "exit": Bench("early exit vs fixed depth decoding a batch: executed depth, FLOP saving, tokens/s at 1/8/32",
                  early_exit.add_arguments, early_exit.main),
    "scaling": Bench("cost growth: decode time and state memory vs context, training step time vs rounds",
                     scaling.add_arguments, scaling.main, scaling.plot),
}


def replot(args: argparse.Namespace) -> int:
    """`looped bench replot NAME FILE.json`: draw a committed record's figure again without re-measuring (a
    changed plot style reaches the committed PNGs; the numbers stay those of the JSON)."""
    import json

    bench, path = BENCHES[args.name], Path(args.file)
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not a JSON file ({err.msg} at line {err.lineno})") from None
    out = Path(args.out) if args.out else path.with_suffix(".png")
    try:
        print(bench.plot(record, out))
    except (KeyError, TypeError, AttributeError) as err:  # a record of another benchmark or an older format
        raise ValueError(f"{path}: not a `looped bench {args.name}` record (cannot draw it: {err!r})") from None
    return 0


# Integer options of a benchmark are counts (steps, batch, dim, procs, ...): >= 1, except these. A 0 or negative
# count would otherwise fail deep inside (a ZeroDivisionError) or time nothing and report it.
COUNT_MINIMUM = {"seed": None, "warmup": 0}


def at_least(minimum: int):
    """An argparse type: an integer >= minimum."""
    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return count


def require_counts(parser: argparse.ArgumentParser) -> None:
    """Give every plain-int option of a benchmark's parser the count check above (its default is untouched)."""
    for action in parser._actions:  # argparse keeps a parser's options here; there is no public accessor
        minimum = COUNT_MINIMUM.get(action.dest, 1)
        if action.type is int and minimum is not None:
            action.type = at_least(minimum)


def add_arguments(subparsers) -> None:
    """Add one sub-command per benchmark to `subparsers`, each with `func` set to its runner, and `replot`."""
    for name, bench in BENCHES.items():
        parser = subparsers.add_parser(name, help=bench.help, description=bench.help)
        bench.add_arguments(parser)
        require_counts(parser)
        parser.set_defaults(func=bench.main)
    parser = subparsers.add_parser("replot", help="draw a benchmark's JSON record again (no measuring)")
    parser.add_argument("name", choices=[n for n, b in BENCHES.items() if b.plot is not None])
    parser.add_argument("file", help="the JSON record the benchmark wrote")
    parser.add_argument("--out", help="PNG path (default: the JSON path with .png)")
    parser.set_defaults(func=replot)


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add `bench` with its own sub-commands to a CLI's subparsers; the CLI then calls `args.func(args)`."""
    parser = subparsers.add_parser("bench", help="run a benchmark and write its JSON result",
                                   description=__doc__.splitlines()[0])
    add_arguments(parser.add_subparsers(dest="bench", required=True))  # argparse lists every name, replot too
    return parser


def main(args: argparse.Namespace) -> int:
    """Run the benchmark named by `args.bench` with the parsed options."""
    return replot(args) if args.bench == "replot" else BENCHES[args.bench].main(args)


def cli(argv: list[str] | None = None) -> int:
    """Standalone entry: `cli(["train", "--steps", "10"])` parses like `looped bench train --steps 10`."""
    parser = argparse.ArgumentParser(prog="looped bench", description=__doc__.splitlines()[0])
    add_arguments(parser.add_subparsers(dest="bench", required=True))
    return main(parser.parse_args(argv))


__all__ = ["BENCHES", "Bench", "add_arguments", "cli", "main", "register_cli", "run_decode_bench", "run_train_bench"]
