"""`looped` command line: one module per group of verbs, each adding its sub-commands with `add_commands(sub)`.

    run.py        train, eval, generate, plot, params, quickstart
    quickstart.py quickstart --task parity|s5|graph|logic (a family's point in minutes)
    depth.py      depth (score at every test-time depth), lens (what each round contributes)
    data.py       data download | info | show
    configs.py    config show (every key of a run config, explained)
    reasoning.py  think (seed 002)
    rlt.py        continue, lengths (seed 003)
    reproduce.py  reproduce <study> (one sub-command per registered study: clw, drt, rlt and plugins')
    compare.py    compare (does looping pay on my data? rows at equal parameters / FLOPs)
    ecosystem.py  push (Hugging Face Hub), lm-eval (lm-evaluation-harness): the optional integrations
    bench         looped.bench.register_cli: bench train | decode | exit | ddp | rlt | think | clw | scaling | replot

`looped` (the console script) is `main`; `python -m looped.cli ...` runs the same (torchrun uses it).
"""

from __future__ import annotations

import argparse

from ..bench import register_cli as add_bench_commands
from . import compare, configs, data, depth, ecosystem, reasoning, reproduce, rlt, run
from ..config import ConfigError
from .common import OneLineParser, describe, fail, one_line_warnings, run_command


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="looped", description="Looped and recurrent Transformers.")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (run, depth, data, configs, compare, reproduce, rlt, reasoning, ecosystem):
        group.add_commands(sub)
    add_bench_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    with one_line_warnings():
        return parse_and_run(argv)


def parse_and_run(argv: list[str] | None) -> int:
    try:
        parser = build_parser()
    except ConfigError as err:  # a broken plugin (its studies are sub-commands): one line, like any user error
        return fail(describe(err), 2)
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, or a usage error already reported in one line
        return done.code if isinstance(done.code, int) else int(done.code is not None)
    return run_command(args)


__all__ = ["build_parser", "main"]
