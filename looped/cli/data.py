"""`looped data download | info | show`: fetch corpora, inspect a config's corpus, print synthetic task examples.

    looped data download enwik8 [--dir data]
    looped data info CONFIG.yaml
    looped data show graph --n 3 --difficulty 6 --hard-negatives
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .common import add_set


def cmd_data_download(args) -> int:
    from ..data.download import config_for, download

    paths = download(args.name, Path(args.dir))
    print(json.dumps({"files": [str(p) for p in paths], "data": config_for(args.name, Path(args.dir))}, indent=2))
    return 0


def cmd_data_info(args) -> int:
    from ..data import load_streams, to_blocks
    from ..train import load_run_config

    config = load_run_config(args.config, args.set)
    if config.task.kind != "lm":  # a synthetic task: what the trainer would train and validate on
        from ..config import to_dict
        from ..train.tasks import make_train_task

        task = make_train_task(config, log=lambda message: None)
        print(json.dumps({"task": to_dict(config.task), "describe": task.description,
                          "targets_per_sequence": task.targets_per_sequence}, indent=2))
        return 0
    streams = load_streams(config.data)
    info = {"corpus": streams.name, "unit": streams.unit, "describe": streams.describe(),
            "train_symbols": int(len(streams.train)), "heldout_symbols": int(len(streams.heldout)),
            "train_blocks": len(to_blocks(streams.train, config.data.block_size, name="train")),
            "heldout_blocks": len(to_blocks(streams.heldout, config.data.block_size, name="held-out"))}
    if streams.unit == "byte":
        info["findings"] = split_findings(config.data, streams)
        for finding in info["findings"]:
            print(f"looped: warning: {finding['message']}", file=sys.stderr)
    print(json.dumps(info, indent=2))
    return 0


def split_findings(data_config, streams) -> list[dict]:
    """Mismatches between the training and held-out text of a byte-level corpus (looped.data.checks), as JSON."""
    import dataclasses

    from ..data.checks import check_split

    def starts(paths: list[str]) -> list[bytes]:  # a byte-order mark is in the first 3 bytes of a file
        out = []
        for path in paths:
            with open(Path(path).expanduser(), "rb") as f:
                out.append(f.read(3))
        return out

    # a byte stream's symbols are < 256: tobytes() of uint8 copies 90 MB in a blink, tolist() would build 90M ints
    findings = check_split(streams.train.astype("uint8").tobytes(), streams.heldout.astype("uint8").tobytes(),
                           train_files=starts(data_config.train_paths), heldout_files=starts(data_config.heldout_paths))
    return [dataclasses.asdict(f) for f in findings]


MAX_SHOWN = 10_000  # examples `data show` prints; 1e12 would be a memory error, not a listing


def show_examples(name: str, n: int = 3, difficulty: int | None = None, hard_negatives: bool = False,
                  seed: int = 0, decued: bool = False) -> list[str]:
    """`n` rendered examples of data task `name` (of `difficulty`, or of its training mix)."""
    from ..data.tasks import get_task, rng_for

    if not 1 <= n <= MAX_SHOWN:
        raise ValueError(f"--n must be between 1 and {MAX_SHOWN:,} (examples to print), got {n}")
    if seed < 0:
        raise ValueError(f"--seed must be >= 0, got {seed}")
    if hard_negatives and name not in ("graph", "graph_hard"):
        raise ValueError("--hard-negatives applies to the graph task only")
    if decued and name != "family":
        raise ValueError("--decued applies to the family task only")
    task = get_task(name, **({"hard_negatives": True} if hard_negatives else {}),
                    **({"decued": True} if decued else {}))
    rng = rng_for(seed)
    batch = task.sample(rng, n, difficulty) if difficulty is not None else task.sample_examples(rng, n)
    return [task.render(batch, i) for i in range(len(batch))]


def cmd_data_show(args) -> int:
    examples = show_examples(args.task, args.n, args.difficulty, args.hard_negatives, args.seed, args.decued)
    for i, text in enumerate(examples):
        print(f"--- {args.task} example {i + 1}")
        print(text)
    return 0


# --- parser -----------------------------------------------------------------------------------------------
def add_commands(sub) -> None:
    """Add `data` with its sub-commands download, info and show."""
    p = sub.add_parser("data", help="download or inspect corpora, show synthetic task examples")
    data_sub = p.add_subparsers(dest="data_command", required=True)
    d = data_sub.add_parser("download", help="fetch official files with checksums")
    d.add_argument("name", choices=["enwik8", "wikitext103", "tinystories"])
    d.add_argument("--dir", default="data")
    d.set_defaults(func=cmd_data_download)
    d = data_sub.add_parser("info", help="sizes and blocks of a config's corpus (or its synthetic task), and "
                                        "mismatches between its train and held-out text")
    d.add_argument("config", nargs="+")
    add_set(d)
    d.set_defaults(func=cmd_data_info)
    add_data_show(data_sub)


def add_data_show(data_subparsers) -> argparse.ArgumentParser:
    from ..data.tasks import task_names
    from ..data.tasks.base import alias_names

    d = data_subparsers.add_parser("show", help="print generated examples of a synthetic task")
    d.add_argument("task", choices=task_names() + alias_names(), help="a task, or a study recipe's name for one")
    d.add_argument("--n", type=int, default=3, help="how many examples")
    d.add_argument("--difficulty", type=int, help="hops / depth / length (default: the task's training mix)")
    d.add_argument("--hard-negatives", action="store_true", help="graph: negatives with no local cue")
    d.add_argument("--decued", action="store_true", help="family: the generator without shortcut cues")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_data_show)
    return d
