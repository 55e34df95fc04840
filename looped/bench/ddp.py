"""DDP / FSDP equivalence: the loss curve of `torchrun --nproc_per_node K` against one process, same global
batch.

    looped bench ddp [--procs 2] [--steps 10] [--parallel ddp|fsdp] [--out results/bench/ddp.json]

Trains the quickstart model on the embedded corpus twice (one process with gradient accumulation, then K
gloo processes each holding a disjoint slice of every global batch; `--parallel fsdp` shards the model over them
with FSDP2) and reports the largest relative difference between the two loss curves. Correctness, not speed: the
JSON holds both curves.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from ..train.config import QUICKSTART
from ..config import merge
from .common import environment, write_json

DEFAULT_OUT = Path("runs/bench/ddp.json")
# The equivalence goal the record judges (its `goal`): the K-process loss curve within this relative difference of
# the one-process curve at every update (the README's benchmark table reads it from here).
GOAL_MAX_RELATIVE_DIFFERENCE = 1e-5


def losses(run: Path) -> list[float]:
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [e["loss"] for e in events if "loss" in e]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp_bench(procs: int = 2, steps: int = 10, parallel: str = "ddp") -> dict:
    config = merge(QUICKSTART, {"train": {"max_steps": steps, "eval_every": 0, "eval_batches": 1, "log_every": 1,
                                          "micro_batch_size": 8 // procs, "threads": 1, "parallel": parallel}})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        base = [sys.executable, "-m", "looped.cli", "train", str(path), "--no-progress"]
        subprocess.run(base + ["--out", f"{tmp}/single"], check=True, env=env, capture_output=True)
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs),
                    "--master_addr", "127.0.0.1", "--master_port", str(free_port())]
        subprocess.run(launcher + base[1:] + ["--out", f"{tmp}/ddp"], check=True, env=env, capture_output=True)
        single, ddp = losses(Path(tmp) / "single"), losses(Path(tmp) / "ddp")
    rel = max(abs(a - b) / abs(a) for a, b in zip(single, ddp))
    goal = GOAL_MAX_RELATIVE_DIFFERENCE
    return {"benchmark": f"{parallel}_equivalence", "parallel": parallel, "procs": procs, "steps": steps,
            "global_batch": 8,
            "single_process_losses": single, "ddp_losses": ddp, "max_relative_difference": rel,
            "goal": {"max_relative_difference": goal, "met": rel <= goal}, "environment": environment()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp",
                        help="replicate the model (DDP) or shard it (FSDP2)")
    parser.add_argument("--out", type=Path, help="default results/bench/<parallel>.json")


def main(args: argparse.Namespace) -> int:
    result = run_ddp_bench(args.procs, args.steps, args.parallel)
    path = write_json(args.out or DEFAULT_OUT.with_name(f"{args.parallel}.json"), result)
    print(f"{args.procs} processes vs 1, {args.steps} updates: max relative loss difference "
          f"{result['max_relative_difference']:.2e} (goal <= 1e-5: {'met' if result['goal']['met'] else 'missed'})")
    print(f"wrote {path}")
    return 0
