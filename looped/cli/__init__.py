"""`looped` command line: one module per group of verbs, each adding its sub-commands with `add_commands(sub)`.

    run.py        train, eval, generate, plot, params, quickstart
    depth.py      depth (score at every test-time depth), lens (what each round contributes)
    data.py       data download | info | show
    configs.py    config show (every key of a run config, explained)
    reasoning.py  think (seed 002)
    rlt.py        continue, lengths (seed 003)
    reproduce.py  reproduce clw | drt | rlt (one sub-command per study)
    ecosystem.py  push (Hugging Face Hub), lm-eval (lm-evaluation-harness): the optional integrations
    bench         looped.bench.register_cli: bench train | decode | ddp | rlt | think | clw

`looped` (the console script) is `main`; `python -m looped.cli ...` runs the same (torchrun uses it).
"""

from __future__ import annotations

import argparse

from ..bench import register_cli as add_bench_commands
from ..train.checkpoint import resolve_checkpoint  # noqa: F401  (re-exported: older imports)
from ..train.config import QUICKSTART  # noqa: F401  (re-exported: older imports)
from . import configs, data, depth, ecosystem, reasoning, reproduce, rlt, run
from .common import run_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="looped", description="Looped and recurrent Transformers.")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (run, depth, data, configs, reproduce, rlt, reasoning, ecosystem):
        group.add_commands(sub)
    add_bench_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser().parse_args(argv))


__all__ = ["build_parser", "main"]
