"""`looped continue | lengths` (seed 003): multi-turn continuation from a saved state (Appendix E) and the
length-grid evaluation.

    looped continue RUN --state chat.safetensors --prompt "0110<EOS>" # new state: BOS, prompt, generate
    looped continue RUN --state chat.safetensors --prompt "1<EOS>"    # later: resumes exactly where it stopped
    looped lengths RUN [--n 1024] [--lengths 32 64 ...] [--out lengths.json]    # table + RUN/lengths.png

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


def check_prompt(tokens: list[int], config) -> None:
    """A prompt may use only the symbols of the run's task (a parity model has never seen "abc"): a one-line
    error listing the allowed ones otherwise."""
    from ..data.tasks.vocabulary import EOS, decode_task_text
    from ..eval.sequence import algorithmic_task

    allowed = set(algorithmic_task(config.task.name, config.task.variant).alphabet()) | {EOS}  # EOS ends a turn
    foreign = [token for token in tokens if token not in allowed]
    if foreign:
        symbols = [decode_task_text([token]) for token in sorted(allowed)]
        shown = " ".join(symbols) if len(symbols) <= 24 else \
            f"{' '.join(symbols[:12])} ... {' '.join(symbols[-4:])}, {len(symbols)} symbols"  # S5: 120 elements
        raise ValueError(f"--prompt: {decode_task_text(foreign[:1])!r} is not a symbol of the {config.task.name} "
                         f"task (allowed: {shown})")


def load_sequence_run(run: str, which: str | None, command: str):
    """(model, RunConfig) of a seed 003 run (task kind `sequence`); other runs are refused in one line."""
    from ..train.checkpoint import resolve_checkpoint
    from ..train import load_model

    model, config = load_model(resolve_checkpoint(run, which))
    if config.task.kind != "sequence":
        raise ValueError(f"{run}: trained on task kind {config.task.kind!r}, not an algorithmic sequence task; "
                         f"`looped {command}` needs a seed 003 run (rlt, rlt0, rlt_baseline)")
    return model, config


def cmd_continue(args) -> int:
    from ..data.tasks.vocabulary import decode_task_text

    model, config = load_sequence_run(args.run, args.which, "continue")
    prompt = _prompt_tokens(args.prompt or "")
    check_prompt(prompt, config)
    result = continue_conversation(model, Path(args.state), prompt,
                                   max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    print(decode_task_text(result["generated"]))
    print(f"state: {args.state} (position {result['position']}, pending {decode_task_text(result['pending'])})",
          file=sys.stderr)
    return 0


def cmd_lengths(args) -> int:
    from ..eval.lengths import evaluate_lengths, length_grid, plot_length_curves, resolve_task
    from ..train.sequence import allowed_lengths

    model, config = load_sequence_run(args.run, args.which, "lengths")
    task = resolve_task(config.task.name, config.task.variant)
    check_grid_fits(task, args.lengths or length_grid(task), config.model.context_length)
    log = None if args.quiet else lambda m: print(m, file=sys.stderr)
    records = evaluate_lengths(model, task, lengths=args.lengths, n=args.n, batch_size=args.batch_size, log=log)
    trained = allowed_lengths(task, config.task.train_lengths)
    result = {"run": str(args.run), "task": config.task.name, "variant": config.task.variant,
              "trained_lengths": [trained[0], trained[-1]], "chance": task.chance_accuracy, "lengths": records}
    result.update(suite_summary(task, records, log=log))
    if args.json:  # for scripts: the JSON on stdout, nothing else
        print_json(result, args.out)
        return 0
    print(lengths_table(records, (trained[0], trained[-1]), task.chance_accuracy, task.primary_metric))
    if args.out:
        print_json_file(result, args.out)
        print(f"wrote {args.out}")
    plot = Path(args.plot) if args.plot else default_lengths_plot(Path(args.run))
    table = [{"row": "model", **record} for record in records]
    params = sum(p.numel() for p in model.parameters())
    plot_length_curves(table, task, plot, train_range=(trained[0], trained[-1]),
                       labels={"model": f"{config.model.arch} ({params:,} parameters)"},
                       title=f"{task.data_key}: {Path(args.run).name}")
    print(f"wrote {plot}")
    return 0


ACCURACY_HEADERS = {"final_state_accuracy": "final state", "prefix_token_accuracy": "prefix token",
                    "sequence_accuracy": "whole sequence"}


def lengths_table(records: list[dict], trained: tuple[int, int], chance: float,
                  primary: str = "final_state_accuracy") -> str:
    """Accuracy by test length as a Markdown table; trained lengths marked with *, the task's headline metric
    (`primary`) marked in its header, its chance stated under it."""
    from ..experiments.render import Column, table

    mark = lambda r: "*" if trained[0] <= r["length"] <= trained[1] else ""  # noqa: E731
    columns = [Column("length", lambda r: f"{r['length']}{mark(r)}"),
               *(Column(f"**{header}**" if metric == primary else header, lambda r, m=metric: f"{r[m]:.3f}")
                 for metric, header in ACCURACY_HEADERS.items())]
    return "\n".join([*table(columns, records), f"* = trained lengths ({trained[0]}-{trained[1]}); bold: the task's "
                      f"headline; chance (uniform prediction) {chance:.3f} for the {ACCURACY_HEADERS[primary]}; "
                      f"{records[0]['sequences']:,} rows per length"])


def default_lengths_plot(run: Path) -> Path:
    """RUN/lengths.png for a run folder (or a checkpoint inside one); ./lengths.png otherwise. Never inside a
    checkpoint folder: its files are what a manifest vouches for."""
    for folder in (run, *run.parents):
        if (folder / "checkpoints").is_dir():
            return folder / "lengths.png"
    return Path("lengths.png")


def print_json_file(result: dict, out: str) -> None:
    import json

    from ..io import atomic_write_text

    atomic_write_text(Path(out), json.dumps(result, indent=2) + "\n")


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

    p = sub.add_parser("lengths", help="seed 003: accuracy on the paper's test-length grid (table + lengths.png)")
    p.add_argument("run", help="run folder or checkpoint folder trained with task kind `sequence`")
    p.add_argument("--lengths", type=int, nargs="+", help="default: the task's grid")
    p.add_argument("--n", type=int, help="rows per length (default 1,024; addition and the Chomsky suite 256)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--which", choices=["last", "best"])
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--plot", help="PNG path (default RUN/lengths.png, ./lengths.png for a folder outside a run)")
    p.add_argument("--json", action="store_true", help="print the JSON instead of the table (no plot)")
    p.add_argument("--quiet", action="store_true", help="no per-length progress lines on stderr")
    p.set_defaults(func=cmd_lengths)


__all__ = ["add_commands"]
