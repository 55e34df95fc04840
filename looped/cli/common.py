"""What every command module of the CLI shares: the `--set` option, JSON results and looped's one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set train.max_steps=100 (repeatable)")


def print_json(result: dict, out: str | None = None) -> None:
    """Print a command's JSON result and, with --out, also write it there (atomically)."""
    from ..io import atomic_write_text

    text = json.dumps(result, indent=2)
    print(text)
    if out:
        atomic_write_text(Path(out), text + "\n")


def fail(message: str) -> int:
    print(f"looped: error: {message}", file=sys.stderr)
    return 2


def run_command(args: argparse.Namespace) -> int:
    """Call the parsed command; bad input becomes one line on stderr and exit status 2 (LOOPED_DEBUG=1 shows
    the traceback instead)."""
    from ..config import ConfigError

    try:
        return args.func(args) or 0
    except (ConfigError, ValueError, RuntimeError, OSError) as err:
        if os.environ.get("LOOPED_DEBUG"):
            raise
        return fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
    except KeyboardInterrupt:
        return fail("interrupted")
