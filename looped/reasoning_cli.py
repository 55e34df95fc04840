"""`looped think` and `looped data show`: a trained reasoning model on your own instance, and generated examples.

    looped think RUN --input "A>B, B>C, C>D ? A D" --steps 1,2,4,8
    looped think RUN --input "(T&!F)|F"                      # budgets default to the run's test budgets
    looped data show graph --n 3 --difficulty 6 --hard-negatives
    looped data show family --n 2

The instance syntax is the task's (`encode`): graph `[nodes=N;] U>V, ... ? SOURCE TARGET`, boolean an
expression over T F & | ! ( ), family `X is the R of Y . ... query : X is the R of Y`. `think` prints, for every
step budget, the model's answer and its confidence (the probability of that answer), next to the answer of the
task's reference solver. Errors are one line (`looped: error: ...`, exit status 2).

Wiring: `register_cli(subparsers)` adds `think`, and `show` under an existing `data` command (or a new one).
`cli(argv)` runs the same commands standalone with the same error handling.
"""

from __future__ import annotations

import argparse
import sys

from .train import reasoning as reasoning_task  # registers task kind "reasoning" for reading run configs

# The words a reader expects for label 1 / label 0 of each task.
ANSWER_WORDS = {"graph": ("reachable", "unreachable"), "boolean": ("T", "F"), "family": ("true", "false")}


def parse_steps(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]; a one-line error for anything else."""
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        steps = []
    if not steps or min(steps) < 1:
        raise ValueError(f"--steps: expected comma-separated integers >= 1, got {text!r}")
    return sorted(set(steps))


def load_reasoning_run(run: str, which: str | None = None):
    """(model in eval mode, RunConfig) of a reasoning run or checkpoint folder."""
    from .train.checkpoint import resolve_checkpoint
    from .train import load_model

    model, config = load_model(resolve_checkpoint(run, which))
    if getattr(config.task, "kind", "lm") != "reasoning":
        raise ValueError(f"{run}: not a reasoning run (task.kind {config.task.kind!r}); `think` needs one trained "
                         f"with task kind 'reasoning'")
    return model, config


def think(run: str, text: str, steps: list[int] | None = None, which: str | None = None) -> dict:
    """Answer and confidence of the run's model on one instance at each step budget."""
    import torch

    from .eval.reasoning import logits_by_budget

    model, config = load_reasoning_run(run, which)
    task = reasoning_task.data_task(config.task)
    batch = task.encode(text)
    steps = steps or reasoning_task.eval_steps(config.task)
    with torch.no_grad():
        logits = logits_by_budget(model, batch, steps)
    yes, no = ANSWER_WORDS[config.task.name]
    rows = []
    for t, logit in logits.items():
        p_yes = float(torch.sigmoid(logit.double())[0])
        rows.append({"steps": t, "answer": yes if p_yes > 0.5 else no, "confidence": max(p_yes, 1 - p_yes),
                     "p_yes": p_yes})
    return {"task": config.task.name, "instance": text, "reference": yes if int(batch.labels[0]) else no,
            "difficulty": int(batch.difficulty[0]), "trained_steps": list(reasoning_task.trained_steps_range(config)),
            "rows": rows}


def cmd_think(args) -> int:
    result = think(args.run, args.input, parse_steps(args.steps) if args.steps else None, args.which)
    lo, hi = result["trained_steps"]
    print(f"{result['task']}: {result['instance']}")
    print(f"reference answer: {result['reference']} (difficulty {result['difficulty']}); trained with T in {lo}..{hi}")
    print(f"{'steps':>5}  {'answer':<12} confidence")
    for row in result["rows"]:
        print(f"{row['steps']:>5}  {row['answer']:<12} {row['confidence']:.3f}")
    return 0


def show_examples(name: str, n: int = 3, difficulty: int | None = None, hard_negatives: bool = False,
                  seed: int = 0) -> list[str]:
    """`n` rendered examples of data task `name` (of `difficulty`, or of its training mix)."""
    from .data.tasks import get_task, rng_for

    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    if hard_negatives and name != "graph":
        raise ValueError("--hard-negatives applies to the graph task only")
    task = get_task(name, **({"hard_negatives": True} if hard_negatives else {}))
    rng = rng_for(seed)
    if difficulty is not None:
        batch = task.sample(rng, n, difficulty)
    elif hasattr(task, "sample_mixed"):  # reasoning tasks: their training difficulties, shuffled
        batch = task.sample_mixed(rng, n, task.train_difficulties)
    else:  # sequence tasks: one training length for the batch
        batch = task.sample_train(rng, n)
    return [task.render(batch, i) for i in range(len(batch))]


def cmd_data_show(args) -> int:
    examples = show_examples(args.task, args.n, args.difficulty, args.hard_negatives, args.seed)
    for i, text in enumerate(examples):
        print(f"--- {args.task} example {i + 1}")
        print(text)
    return 0


# --- parser -----------------------------------------------------------------------------------------------


def _subparsers_of(parser: argparse.ArgumentParser):
    """The sub-command action of a parser that has one (argparse keeps it among its actions)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def add_think(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("think", help="a reasoning run's answer and confidence at several step budgets",
                              description="Answer and confidence of a trained reasoning model on your own instance "
                                          "at each step budget.")
    p.add_argument("run", help="run folder or checkpoint folder")
    p.add_argument("--input", required=True, help="the instance in the task's text syntax")
    p.add_argument("--steps", help="comma-separated step budgets, e.g. 1,2,4,8 (default: the run's test budgets)")
    p.add_argument("--which", choices=["last", "best"], help="checkpoint of a run folder (default: train.select)")
    p.set_defaults(func=cmd_think)
    return p


def add_data_show(data_subparsers) -> argparse.ArgumentParser:
    from .data.tasks import task_names

    d = data_subparsers.add_parser("show", help="print generated examples of a synthetic task")
    d.add_argument("task", choices=task_names())
    d.add_argument("--n", type=int, default=3, help="how many examples")
    d.add_argument("--difficulty", type=int, help="hops / depth / length (default: the task's training mix)")
    d.add_argument("--hard-negatives", action="store_true", help="graph: negatives with no local cue")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_data_show)
    return d


def register_cli(subparsers, data_subparsers=None) -> None:
    """Add `think` to `subparsers`, and `show` to the `data` command's sub-commands (created if absent)."""
    add_think(subparsers)
    if data_subparsers is None:
        data = subparsers.choices.get("data")
        if data is None:
            data = subparsers.add_parser("data", help="inspect synthetic tasks")
        data_subparsers = _subparsers_of(data) or data.add_subparsers(dest="data_command", required=True)
    add_data_show(data_subparsers)


def cli(argv: list[str] | None = None) -> int:
    """Standalone entry with looped's one-line errors: `cli(["think", "runs/x", "--input", "A>B ? A B"])`."""
    from .config import ConfigError

    parser = argparse.ArgumentParser(prog="looped")
    register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except (ConfigError, ValueError, RuntimeError, OSError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"looped: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
