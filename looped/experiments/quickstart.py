"""`looped quickstart --task parity|s5|graph|logic`: a small recipe per family that shows the family's point in
minutes on a CPU, printed as a table.

    parity, s5   (seed 003) RLT-1 and a Transformer of the same width, side by side, trained on short strings and
                 scored at and beyond the longest training length: the recurrence carries the state past it, the
                 Transformer does not.
    graph, logic (seed 002) the depth-recurrent core, then its test accuracy by difficulty x step budget: more
                 thinking steps solve harder instances.

The recipes (QUICK_RECIPES) are the CPU study's (looped.experiments.rlt / drt) with a shorter budget and, for
the sequence tasks, shorter training strings; configs/quickstart/<task>.yaml holds each (a test keeps them
equal). Every row trains in RUN/<row>/ with resume="auto", so running the same command again after Ctrl-C
continues where it stopped and only then scores and prints the table. results/quickstart/probes.md records the
probe runs behind the budgets and which recipes do not show the point reliably.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import merge
from ..io import atomic_write_text
from . import drt, rlt
from .render import Column, left, table

TASKS = ("parity", "s5", "graph", "logic")


@dataclass(frozen=True)
class QuickRecipe:
    """One task's quickstart: the recipe of its first row, the rows (name -> model section replacing the
    recipe's; None keeps it), the columns of its table, and what it honestly shows at this budget."""

    family: str  # "sequence" (seed 003) or "reasoning" (seed 002)
    config: dict
    rows: dict = field(default_factory=dict)
    columns: tuple[int, ...] = ()  # test lengths (sequence) or difficulties (reasoning)
    test_rows: int = 256  # rows per test length / difficulty
    idle_minutes: float | None = None  # on 2 idle cores: CPU minutes or load-scaled wall (probes.md); None: not known
    caveat: str = ""  # printed beside the table when the recipe does not show the point in every seed


def _sequence_config(task: str, train_lengths: list[int], validation_lengths: list[int], max_steps: int,
                     lr: float = 1.0e-3, curriculum_fraction: float = 1.0) -> dict:
    """The CPU study's RLT-1 recipe on shorter strings: the curriculum ramps from the shortest string over the
    first `curriculum_fraction` of the updates (parity: all of them; parity_probes.md: a fast ramp teaches a
    length-bound shortcut)."""
    config = rlt.run_config_dict(task if task != "s5" else "s5_swaps", "rlt1", "cpu")
    # A decoder window of 2 (the study's: 8) leaves the running state to the feedback path: with 8, strings of up
    # to 8 symbols fit through the window and the parity probes stayed at chance (probes.md)
    changes = {"model": {"window": 2},
               "task": {"train_lengths": train_lengths, "curriculum_start": train_lengths[0],
                        "curriculum_fraction": curriculum_fraction, "validation_lengths": validation_lengths,
                        "validation_size": 128},
               "optim": {"lr": lr},
               "train": {"max_steps": max_steps, "eval_every": max(1, max_steps // 6), "log_every": 25,
                         "select": "last"}}
    return merge(config, changes)


def _transformer_row(config: dict) -> dict:
    """The seed 003 Transformer baseline at the width of the recipe's RLT-1 (4 layers: the 2+2 RLT's depth)."""
    model = config["model"]
    return {"arch": "rlt_baseline", "dim": model["dim"], "heads": model["heads"], "ffn_dim": model["ffn_dim"],
            "context_length": model["context_length"], "layers": 4}


def _reasoning_config(task: str, max_steps: int, lr: float | None = None, task_changes: dict | None = None) -> dict:
    """The CPU study's recipe for `task` with a budget of `max_steps` updates; `lr` replaces the study's rate
    (None keeps it: logic's 2e-3 is already tuned for CPU, graph's paper rate 3e-4 is too slow for minutes);
    `task_changes` replaces task settings (logic: shallower training formulas)."""
    config = drt.recipe(task, "cpu")
    config["train"].pop("max_targets")
    changes = {"task": {"val_size": 500, "test_per_bucket": 200, **(task_changes or {})},
               "optim": {} if lr is None else {"lr": lr},
               "train": {"max_steps": max_steps, "eval_every": max(1, max_steps // 6), "log_every": 25}}
    return merge(config, changes)


LOGIC_TASK = {"train_difficulties": [1, 2, 3], "steps_range": [3, 8], "test_difficulties": [2, 3, 4, 5, 6, 8]}


def _recipes() -> dict[str, QuickRecipe]:
    parity = _sequence_config("parity", [3, 16], [16, 32], 900)
    # S5 learns the group slowly (probes.md): the longest strings reached by half-way and a faster rate
    s5 = _sequence_config("s5", [2, 8], [8, 16], 4000, lr=3.0e-3, curriculum_fraction=0.5)
    return {
        "parity": QuickRecipe("sequence", parity, {"RLT-1": None, "Transformer": _transformer_row(parity)},
                              columns=(8, 16, 32, 64), idle_minutes=2.0),
        "s5": QuickRecipe("sequence", s5, {"RLT-1": None, "Transformer": _transformer_row(s5)},
                          columns=(4, 8, 16, 32), idle_minutes=5.0,  # RLT-1's row: 4.7 CPU min (probes.md)
                          caveat="S5 learns late: RLT-1 passed 0.9 at 16 operations only in the last ~700 of its "
                                 "4,000 updates, in the one seed tried (results/quickstart/probes.md)"),
        "graph": QuickRecipe("reasoning", _reasoning_config("graph", 600, lr=1.0e-3), {"core": None},
                             idle_minutes=3.0),
        # logic: formulas of depth 1-3 (the study's: 1-8) and 3-8 thinking steps in training (4-16): shallow
        # formulas are short and few steps cheap, so 2,500 updates take ~3 CPU minutes; tested to depth 8
        # (depths 1-4 solved none beyond 4 at this budget: results/quickstart/probes.md)
        "logic": QuickRecipe("reasoning", _reasoning_config("logic", 2500, task_changes=LOGIC_TASK), {"core": None},
                             idle_minutes=3.0,
                             caveat="one seed tried (42): beyond its trained depths it solved depth 5 at 0.81, "
                                    "just over the 0.8 bar, so another seed may fall short "
                                    "(results/quickstart/probes.md)"),
    }


QUICK_RECIPES = _recipes()


def recipe(task: str) -> QuickRecipe:
    if task not in QUICK_RECIPES:
        raise ValueError(f"--task: unknown task {task!r} (known: {', '.join(TASKS)})")
    return QUICK_RECIPES[task]


def row_config(task: str, row: str, overrides: dict | None = None) -> dict:
    """The run config (a dict) of one row of a task's quickstart, with --set overrides merged over it."""
    spec = recipe(task)
    config = copy.deepcopy(spec.config)
    model = spec.rows[row]
    if model is not None:
        config["model"] = copy.deepcopy(model)
    return merge(config, overrides or {})


def row_folder(out: Path, row: str) -> Path:
    return out / row.lower().replace("-", "")


def write_configs(root: Path = Path("configs/quickstart")) -> list[Path]:
    """configs/quickstart/<task>.yaml: each task's first row (the one that shows the family's point)."""
    import yaml

    written = []
    for task, spec in QUICK_RECIPES.items():
        path = root / f"{task}.yaml"
        others = [name for name, model in spec.rows.items() if model is not None]
        header = (f"# `looped quickstart --task {task}` trains this ({next(iter(spec.rows))} row)"
                  + (f" and the same recipe with the {', '.join(others)} model" if others else "")
                  + (f"; ~{spec.idle_minutes:g} min on 2 idle cores (estimated, results/quickstart/probes.md).\n"
                     if spec.idle_minutes else "; its time is not measured yet.\n")
                  + "# Generated by looped.experiments.quickstart.write_configs.\n")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, header + yaml.safe_dump(spec.config, sort_keys=False))
        written.append(path)
    return written


# --- timing ------------------------------------------------------------------------------------------------------
def slowdown(threads: int, load: float | None = None, cores: int | None = None) -> float:
    """How much longer than on idle cores a run of `threads` threads takes here, from the 1-minute load average:
    the runnable threads (load + ours) share the cores. A rough guide (load counts threads waiting on disk too),
    and the reason the ETA line shows the load it used."""
    import os

    load = os.getloadavg()[0] if load is None else load
    cores = cores or os.cpu_count() or 1
    return max(1.0, (load + threads) / cores)


def eta_line(what: str, idle_minutes: float, one_thread_minutes: float | None, threads: int,
             load: float | None = None, cores: int | None = None) -> str:
    """A quickstart's first line: what it trains, the condition its time holds for, and a lower bound here. The
    load rule assumes every runnable thread gets an even share of the cores; jobs of higher priority take more
    (results/quickstart/logic.json: 27.7 min wall over its calls for 4.0 CPU minutes), so the line says it is a
    guess, and MeasuredEta prints the time left measured from the run itself after its first evaluation."""
    import os

    load = os.getloadavg()[0] if load is None else load
    cores = cores or os.cpu_count() or 1
    one_thread = f"; with one thread ~{one_thread_minutes:.0f}" if one_thread_minutes else ""
    base = one_thread_minutes if threads == 1 and one_thread_minutes else idle_minutes
    eta = base * slowdown(threads, load, cores)
    return (f"quickstart {what}: ~{idle_minutes:g} min on 2 idle cores{one_thread}; here at least ~{eta:.0f} min "
            f"(load average {load:.1f} on {cores} core(s), {threads} torch thread(s): a guess that assumes an even "
            f"share of the cores; the time measured here follows the first evaluation)")


class MeasuredEta:
    """A Trainer's `log` that prints every message and, after the first evaluation of this call, the time left
    measured from the run's own rate here (updates since this call started training / minutes), which holds
    whatever else the machine runs. Set `.trainer` before training."""

    def __init__(self, print_line=print):
        self.print_line, self.trainer = print_line, None
        self.start: tuple[float, int] | None = None  # (clock, update) when this call's training began
        self.done = False

    def __call__(self, message: str) -> None:
        self.print_line(message)
        trainer = self.trainer
        if trainer is None or self.done:
            return
        if message.startswith("training "):  # the trainer's start line: resumed or not, its step is set
            self.start = (time.perf_counter(), trainer.step)
        elif message.startswith("val @") and self.start is not None and trainer.step > self.start[1]:
            minutes = (time.perf_counter() - self.start[0]) / 60
            rate = (trainer.step - self.start[1]) / max(minutes, 1e-9)
            left = (trainer.total_steps - trainer.step) / rate
            self.print_line(f"ETA measured here: ~{left:.0f} min left for this run ({rate:,.0f} updates/min since "
                            f"update {self.start[1]})")
            self.done = True


def task_eta_line(task: str, threads: int, load: float | None = None, cores: int | None = None) -> str:
    """The task quickstarts train every row with one thread (train.threads: 1): their time is that time."""
    spec = recipe(task)
    if spec.idle_minutes is None:
        return f"quickstart --task {task} (trains {' and '.join(spec.rows)}): its time is not measured yet"
    return eta_line(f"--task {task} (trains {' and '.join(spec.rows)})", spec.idle_minutes, None, threads,
                    load, cores)


# --- tables --------------------------------------------------------------------------------------------------
def marked(values: list[int], trained: tuple[int, int]) -> list[str]:
    """Column headers: each value, * where it lies in the trained range."""
    return [f"{v}{'*' if trained[0] <= v <= trained[1] else ''}" for v in values]


def sequence_table(records: dict[str, list[dict]], trained: tuple[int, int], chance: float) -> str:
    """Final-state accuracy by test length, one row per model; trained lengths marked with *."""
    lengths = [r["length"] for r in next(iter(records.values()))]
    columns = [left("model", lambda item: item[0]),
               *(Column(head, lambda item, i=i: f"{item[1][i]['final_state_accuracy']:.2f}")
                 for i, head in enumerate(marked(lengths, trained)))]
    return "\n".join([*table(columns, records.items()), "accuracy of the final answer by string length; * = "
                      f"trained lengths ({trained[0]}-{trained[1]}); chance {chance:.2f}"])


def grid_table(grid, trained: tuple[int, int], chance: float, difficulty_name: str) -> str:
    """Accuracy by step budget (rows) x difficulty (columns); trained difficulties marked with *."""
    columns = [Column(f"steps \\ {difficulty_name}", lambda i: str(grid.budgets[i])),
               *(Column(head, lambda i, j=j: f"{grid.accuracy[i][j]:.2f}")
                 for j, head in enumerate(marked(grid.difficulties, trained)))]
    return "\n".join([*table(columns, range(len(grid.budgets))),
                      f"test accuracy by thinking steps and {difficulty_name}; * = trained {difficulty_name} "
                      f"({trained[0]}-{trained[1]}); chance {chance:.2f}"])


# --- the verdicts ---------------------------------------------------------------------------------------------------
def sequence_verdict(records: dict[str, list[dict]], trained_max: int, chance: float) -> tuple[bool, str]:
    """Shown when RLT-1 is right (>= 0.9) at the first length beyond training while the Transformer is near
    chance (< chance + 0.15) there."""
    beyond = [r["length"] for r in records["RLT-1"] if r["length"] > trained_max]
    if not beyond:
        return False, "no test length beyond the trained ones"
    length = beyond[0]
    rlt1 = next(r for r in records["RLT-1"] if r["length"] == length)["final_state_accuracy"]
    base = next(r for r in records["Transformer"] if r["length"] == length)["final_state_accuracy"]
    shown = rlt1 >= 0.9 and base < chance + 0.15
    what = (f"at {length}, beyond the trained lengths: RLT-1 {rlt1:.2f}, Transformer {base:.2f} (chance "
            f"{chance:.2f})")
    return shown, what


SOLVED = 0.8  # a difficulty counts as solved at a budget from this test accuracy on


def solved_difficulty(grid, row: int) -> int | None:
    """The hardest difficulty solved at budget row `row`, counting up from the easiest while each is solved."""
    solved = None
    for difficulty, accuracy in zip(grid.difficulties, grid.accuracy[row]):
        if accuracy < SOLVED:
            break
        solved = difficulty
    return solved


def grid_verdict(grid, chance: float, trained_max: int) -> tuple[bool, str]:
    """Shown when the most thinking steps solve a harder difficulty than one step does, and one beyond the
    trained ones (the core extrapolates by thinking longer, not by having memorised the trained depths)."""
    solved = [solved_difficulty(grid, i) for i in range(len(grid.budgets))]
    steps_text = ", ".join(f"{steps} step{'s' if steps > 1 else ''} -> {d if d is not None else 'none'}"
                           for steps, d in zip(grid.budgets, solved))
    first, last = solved[0] or 0, solved[-1] or 0
    shown = last > first and last > trained_max
    return shown, (f"hardest difficulty solved (accuracy >= {SOLVED}, every easier one too) by thinking steps: "
                   f"{steps_text}; trained up to {trained_max}, chance {chance:.2f}")


def write_result(path: Path, task: str, table: str, shown: bool, verdict: str, extra: dict) -> None:
    """results/quickstart/<task>.json (the command writes it; the README quotes it)."""
    atomic_write_text(path, json.dumps({"task": task, "shown": shown, "verdict": verdict, "table": table,
                                        "written": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **extra},
                                       indent=2) + "\n")


__all__ = ["QUICK_RECIPES", "TASKS", "MeasuredEta", "QuickRecipe", "eta_line", "slowdown", "task_eta_line",
           "grid_table", "grid_verdict", "recipe", "row_config", "row_folder", "sequence_table", "sequence_verdict",
           "write_configs", "write_result"]
