"""`looped continue | lengths` (seed 003): multi-turn continuation from a saved state (Appendix E) and the
length-grid evaluation.

    looped continue RUN --state chat.safetensors --prompt "0110="     # new state: BOS, prompt, generate
    looped continue RUN --state chat.safetensors --prompt "1="        # later: resumes exactly where it stopped
    looped lengths RUN [--n 1024] [--lengths 32 64 ...] [--out lengths.json]

A run trained on a Chomsky-hierarchy task (data/tasks/chomsky.py) is scored on that suite's grid (50 ... 500)
and its report adds the suite's score (per-token accuracy averaged over the lengths) beside the paper's
published Transformer / LSTM figures (experiments/chomsky.py).

The state file (what it holds, how a state from another model is refused) is infer/state.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..infer.state import continue_conversation
from .common import print_json


# --- commands ------------------------------------------------------------------------------------------------
def _prompt_tokens(text: str) -> list[int]:
    """Prompt text as byte tokens; <BOS>/<EOS>/... name the task specials (e.g. "<EOS>" to end a turn)."""
    from ..data.tasks.vocabulary import SPECIAL_TOKENS

    tokens, rest = [], text
    while rest:
        for name, token in SPECIAL_TOKENS.items():
            if rest.startswith(f"<{name}>"):
                tokens.append(token)
                rest = rest[len(name) + 2:]
                break
        else:
            tokens.extend(rest[0].encode("utf-8"))
            rest = rest[1:]
    return tokens


def cmd_continue(args) -> int:
    from ..train import sequence  # noqa: F401  (first: the `sequence` task kind, so seed 003 run configs load)
    from ..train.checkpoint import resolve_checkpoint
    from ..data.tasks.vocabulary import decode_task_text
    from ..train import load_model

    model, _ = load_model(resolve_checkpoint(args.run, args.which))
    result = continue_conversation(model, Path(args.state), _prompt_tokens(args.prompt or ""),
                                   max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    print(decode_task_text(result["generated"]))
    print(f"state: {args.state} (position {result['position']}, pending {decode_task_text(result['pending'])})",
          file=sys.stderr)
    return 0


def cmd_lengths(args) -> int:
    from ..train import sequence  # noqa: F401  (first, see cmd_continue)
    from ..train.checkpoint import resolve_checkpoint
    from ..eval.lengths import evaluate_lengths, length_grid, resolve_task
    from ..train import load_model

    model, config = load_model(resolve_checkpoint(args.run, args.which))
    if config.task.kind != "sequence":
        raise ValueError(f"{args.run}: trained on task kind {config.task.kind!r}, not an algorithmic sequence task")
    task = resolve_task(config.task.name, config.task.variant)
    check_grid_fits(task, args.lengths or length_grid(task), config.model.context_length)
    records = evaluate_lengths(model, task, lengths=args.lengths, n=args.n, batch_size=args.batch_size,
                               log=None if args.quiet else lambda m: print(m, file=sys.stderr))
    report = {"run": str(args.run), "task": config.task.name, "variant": config.task.variant, "lengths": records}
    report.update(suite_summary(task, records, log=None if args.quiet else lambda m: print(m, file=sys.stderr)))
    print_json(report, args.out)
    return 0


def check_grid_fits(task, lengths, context_length: int) -> None:
    """Refuse, in one line and before any test set is built, a grid whose rows outgrow the model's context."""
    from ..eval.lengths import widest_row

    length, positions = widest_row(task, lengths)
    if positions > context_length:
        raise ValueError(f"{task.name} rows of length {length} take {positions} positions, more than the model's "
                         f"context_length {context_length} (pass shorter --lengths)")


def suite_summary(task, records: list[dict], log=None) -> dict:
    """For a Chomsky-hierarchy task: the suite's score (its headline metric averaged over the test lengths) and
    the paper's Transformer / LSTM figures beside it; nothing for other tasks."""
    from ..data.tasks.chomsky import ChomskyTask
    from ..eval.lengths import length_average
    from ..experiments.chomsky import CITATION, published_row

    if not isinstance(task, ChomskyTask):
        return {}
    score = length_average(records, task.primary_metric)
    published = published_row(task.name)
    if log:
        shown = ", ".join(f"{row} {'not found' if value is None else f'{value:.1f}%'}"
                          for row, value in published.items())
        log(f"score ({task.primary_metric} averaged over {len(records)} lengths): {100 * score:.1f}%; "
            f"published: {shown}")
    return {"suite": "chomsky", "paper_task": task.paper_name, "level": task.level, "metric": task.primary_metric,
            "score": score, "chance": task.chance_accuracy, "published_percent": published, "citation": CITATION}


def add_commands(sub) -> None:
    """Add `continue` and `lengths` to the `looped` sub-commands."""
    p = sub.add_parser("continue", help="seed 003: continue a saved decode state (prefill, generate, save)")
    p.add_argument("run", help="run folder or checkpoint folder (rlt / rlt0)")
    p.add_argument("--state", required=True, help="state file (.safetensors); created when missing")
    p.add_argument("--prompt", default="", help="text to consume first; <EOS>, <BOS>, <SEP> name specials")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--seed", type=int, default=0, help="sampler seed of a new state (saved with it)")
    p.add_argument("--which", choices=["last", "best"])
    p.set_defaults(func=cmd_continue)

    p = sub.add_parser("lengths", help="seed 003: accuracy on the paper's test-length grid, as JSON")
    p.add_argument("run", help="run folder or checkpoint folder trained with task kind `sequence`")
    p.add_argument("--lengths", type=int, nargs="+", help="default: the task's grid")
    p.add_argument("--n", type=int, help="rows per length (default 1,024; addition and the Chomsky suite 256)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--which", choices=["last", "best"])
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_lengths)


__all__ = ["add_commands"]
