"""`looped config show ARCH|CONFIG.yaml`: every key of a run config with its value and one line of meaning.

    looped config show transformer                      # an architecture with every default
    looped config show configs/examples/raw_text.yaml --set train.max_steps=500

The output is YAML (values as in a config file, meanings as comments), so any part of it can be copied into a
config. A value that differs from the key's default says the default too.
"""

from __future__ import annotations

import json

from .common import add_set, names_a_config


def cmd_config_show(args) -> int:
    from ..train.config import arch_run_config, describe_config, load_run_config

    is_file = names_a_config(args.target)
    config = load_run_config(args.target, args.set) if is_file else arch_run_config(args.target, args.set)
    print(f"# {args.target}: every key, its value and what it does")
    print(format_rows(describe_config(config)))
    return 0


def format_rows(rows) -> str:
    """YAML with nested sections: `key: value  # meaning (default: X)`."""
    lines, opened = [], set()
    width = max(len(row.key.split(".")[-1]) + 2 * row.key.count(".") + len(yaml_value(row.value)) for row in rows)
    for row in rows:
        *sections, name = row.key.split(".")
        for depth in range(len(sections)):
            path = ".".join(sections[:depth + 1])
            if path not in opened:
                opened.add(path)
                lines.append(f"{'  ' * depth}{sections[depth]}:")
        text = f"{'  ' * len(sections)}{name}: {yaml_value(row.value)}"
        note = row.meaning or ""
        if row.default != row.value:
            note += f" (default: {yaml_value(row.default)})"
        lines.append(f"{text.ljust(width + 2)}  # {note.strip()}" if note.strip() else text)
    return "\n".join(lines)


def yaml_value(value) -> str:
    """A value as it would be written in a config file: null, true, 3e-4, "text", [0.9, 0.95]."""
    return json.dumps(value)


# --- parser -----------------------------------------------------------------------------------------------
def add_commands(sub) -> None:
    """Add `config` with its sub-command show."""
    p = sub.add_parser("config", help="explain a run config: every key, its value and its meaning")
    config_sub = p.add_subparsers(dest="config_command", required=True)
    d = config_sub.add_parser("show", help="every key of an architecture's defaults or a config file, explained")
    d.add_argument("target", help="an architecture name (`looped params` lists them) or YAML config file(s)")
    add_set(d)
    d.set_defaults(func=cmd_config_show)
