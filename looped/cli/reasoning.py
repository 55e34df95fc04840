"""`looped think`: a trained reasoning model's answer on your own instance, at several step budgets.

    looped think RUN --input "A>B, B>C, C>D ? A D" --steps 1,2,4,8
    looped think RUN --input "(T&!F)|F"                      # budgets default to the run's test budgets

The instance syntax is the task's (`from_text`): graph `[nodes=N;] U>V, ... ? SOURCE TARGET`, boolean an
expression over T F & | ! ( ), family `X is the R of Y . ... query : X is the R of Y`. `think` prints, for every
step budget, the model's answer and its confidence (the probability of that answer), next to the answer of the
task's reference solver. Errors are one line (`looped: error: ...`, exit status 2).

(`looped data show` prints generated examples of a task: cli/data.py.)
"""

from __future__ import annotations

from ..train import reasoning as reasoning_task  # registers task kind "reasoning" for reading run configs


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
    from ..train.checkpoint import resolve_checkpoint
    from ..train import load_model

    model, config = load_model(resolve_checkpoint(run, which))
    if config.task.kind != "reasoning":
        raise ValueError(f"{run}: not a reasoning run (task.kind {config.task.kind!r}); `think` needs one trained "
                         f"with task kind 'reasoning'")
    return model, config


def think(run: str, text: str, steps: list[int] | None = None, which: str | None = None) -> dict:
    """Answer and confidence of the run's model on one instance at each step budget."""
    import torch

    from ..eval.reasoning import logits_by_budget

    model, config = load_reasoning_run(run, which)
    task = reasoning_task.data_task(config.task)
    batch = task.from_text(text)
    steps = steps or reasoning_task.eval_steps(config.task)
    with torch.no_grad():
        logits = logits_by_budget(model, batch, steps)
    yes, no = task.answer_words
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


# --- parser -----------------------------------------------------------------------------------------------


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


def add_commands(sub) -> None:
    """Add `think` to the `looped` sub-commands."""
    add_think(sub)
