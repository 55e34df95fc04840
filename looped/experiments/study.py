"""The study engine: a paper's reproduction is a registered `StudySpec`; everything common to studies is here.

A spec declares what differs between papers: its axes (the key columns of its results.csv, each one option of
`looped reproduce <name>`), how a `Study` object is built for a results folder, its recipes (the YAML files
under configs/<name>/), optionally a default plan, and a toy setting the shared study drivers train in seconds.
The `Study` it builds knows one run: its config, its folder, how to score it, and how to write the report;
`StudyBase` holds the defaults most studies share (it trains, `prepare` does nothing, a failed row names its arch).

The engine owns the rest: planning (the product of the axes, filtered by the spec), claiming each run
(several processes may share a study), training or resuming it, recording a failure as a row, one `RunSummary`
per run, scoring finished runs again for a score the study added later (`Backfill`; a run whose folder is gone
is trained again and checked against its row first: experiments/retrain.py), `--status` and the machine's booking
(`--stop-after`, `--finish-within`: experiments/schedule.py), the recipe writer, and the `looped reproduce`
options (looped.cli builds them from the axes; nothing under experiments/ parses arguments).

    @register_study
    def my_paper() -> StudySpec: ...                 # or register_study(StudySpec(...)) at import

    run_study("my_paper", out=..., runs=..., select={"task": ("parity",)}, overrides={...})

A spec outside this package is a plugin, loaded like an architecture plugin (LOOPED_PLUGINS=my_study.py, or
the entry-point group 'looped.studies'); examples/study_plugin.py is a worked example.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from ..config import ConfigError
from ..io import atomic_write_text
from ..train import Trainer, TrainingError
from ..train import checkpoint as ckpt
from ..train.run_folder import read_metrics
from ..train.trainer import TrainingInterrupted
from .backfills import (DIFFERS, REPLACED, REPRODUCES, RETRAINED, RETRAINING, Backfill, backfill, backfill_checkpoint,
                        claim_path, owed_retrains, retrain_status, retrain_verdict)
from .claims import ClaimSet
from .report import cell
from .results import OVERRIDES, ResultTable, check_same_settings, overrides_text, run_label
from .schedule import Booking, pending_runs, status_report

if TYPE_CHECKING:
    from .recipes import Recipe

Values = tuple | Callable[[str], tuple]  # a fixed tuple, or one per scale


# --- the spec -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Axis:
    """One dimension of a study's grid: a key column of its results.csv and an option of `looped reproduce`.

    `cell` turns a value as typed on the command line into the value the key holds (DRT's alpha "1" -> "1.0",
    seeds -> int); it raises ValueError on a value it cannot take."""

    name: str  # the key column, e.g. "task"
    option: str  # the command-line option without dashes, e.g. "tasks"
    default: Values  # the plan's values unless the option is given
    known: Values = ()  # the accepted values (() = whatever `cell` accepts)
    cell: Callable[[str], Any] = str
    aliases: Mapping[str, str] = field(default_factory=dict)
    help: str = ""

    def defaults(self, scale: str) -> tuple:
        return tuple(self.default(scale) if callable(self.default) else self.default)

    def known_values(self, scale: str) -> tuple:
        return tuple(self.known(scale) if callable(self.known) else self.known)

    def parse(self, given: Iterable[str], scale: str) -> tuple:
        """The command line's values as key values; ValueError naming the option and the first bad value."""
        known = self.known_values(scale)
        values = []
        for text in given:
            text = self.aliases.get(str(text), str(text))
            if known and text not in {str(k) for k in known}:
                raise ValueError(f"--{self.option}: unknown name {text!r} (known: {', '.join(map(str, known))})")
            try:
                values.append(self.cell(text))
            except ValueError as err:
                reason = f"{text!r} is not an integer" if self.cell is int else err  # int()'s own words say less
                raise ValueError(f"--{self.option}: {reason}") from None
        return tuple(values)


def unit_interval(text: str) -> str:
    """An Axis `cell` for a weight in [0, 1] (DRT's alpha), keyed as a float's text: "1" -> "1.0"."""
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError(f"a weight lies in [0, 1], got {text}")
    return str(value)


def grouped_plan(axes: Sequence[Axis], plan: Iterable[tuple]) -> list[dict]:
    """Run keys from a paper's plan written as groups: each group gives one value of every axis but the last,
    then a tuple of the last axis's values (("graph", "drt", 0.0, (42, 43, 44)), ...); each value is keyed by its
    axis's `cell`, as a command-line value would be."""
    return [{axis.name: axis.cell(str(value)) for axis, value in zip(axes, (*group, last))}
            for *group, values in plan for last in values]


@dataclass(frozen=True)
class Flag:
    """A study option that is not an axis (the CLW budget, DRT's --shortcuts-only): `choices` make it a choice
    with `default`, no choices a switch. Its value reaches `build` as a keyword argument named `name`."""

    name: str
    help: str
    choices: tuple[str, ...] = ()
    default: Any = None


@dataclass(frozen=True)
class StudySpec:
    name: str  # `looped reproduce <name>`, configs/<name>/, results/<name>_<scale>/
    help: str
    axes: tuple[Axis, ...]  # in key order: results.csv's key columns, the training order (first = outermost)
    build: Callable[..., Study]  # build(out, runs, *, scale, overrides, **flags and toy options) -> Study
    recipes: Callable[[], Iterable[Recipe]]  # everything under configs/<name>/
    flags: tuple[Flag, ...] = ()
    keep: Callable[[dict, str], bool] = lambda key, scale: True  # drops combinations the paper does not run
    default_plan: Callable[[str], list[dict] | None] | None = None  # the plan when no axis is given (None: product)
    results_name: Callable[[str, dict], str] | None = None  # results/<this>; default "<name>_<scale>"
    # {"select", "overrides", "options"} training in seconds, or toy(tmp folder) -> that (to write toy data there)
    toy: dict | Callable[[Path], dict] | None = None
    scales: tuple[str, ...] = ("cpu", "full")
    claims: ClaimSet | None = None  # the paper's claims: claims.md is rewritten with every report

    def folder_name(self, scale: str, flags: Mapping[str, Any]) -> str:
        return self.results_name(scale, dict(flags)) if self.results_name else f"{self.name}_{scale}"


class Study(Protocol):
    """What a spec builds for one results folder: its tables, its runs and its report."""

    results: ResultTable  # a row there marks a run done (or failed)
    trains: bool  # False: a study call that only records (DRT --shortcuts-only): prepare, then report
    backfills: tuple[Backfill, ...]  # scores added after some runs had finished (the engine's `backfill`)
    # reproduces(key, run): a retrained run's headline figure beside its committed row's (retrain.Reproduction);
    # None in place of the method: the study cannot check a retrain, so `--retrain-owed` trains nothing
    reproduces: Callable[[dict, RunSummary], Any] | None

    def config(self, key: dict):
        """The RunConfig of the run of `key` (ConfigError: the combination does not exist, it is skipped)."""

    def folder(self, key: dict) -> Path:
        """Where the run of `key` trains (and resumes)."""

    def failure_key(self, key: dict, config) -> dict:
        """The columns a `failed: ...` row of this run carries besides its status."""

    def prepare(self, plan: list[dict], log) -> None:
        """Work owed by runs finished earlier (scores added to the study after they ran); may do nothing."""

    def evaluate(self, key: dict, config, run: RunSummary, log) -> None:
        """Score a finished run and add its rows (results last: a row there marks the run done)."""

    def report(self) -> None:
        """Rewrite tables, plots and claims.md from the CSVs (rows of other processes included)."""

    def run_files(self, key: dict) -> list[str]:
        """Files the run of `key` writes under the results folder besides table rows (paths relative to it; DRT's
        test grids): what `looped reproduce --merge-from` copies with the run's rows."""

    def timed_like(self, key: dict) -> tuple[dict, float] | None:
        """For a run whose setting has no finished seed: (the key of a setting it takes about as long as, times
        this factor), for --status's minutes and --finish-within's booking; None: no estimate."""


class StudyBase:
    """The defaults most studies share, so a study writes only what is its own: `results`, `config`, `evaluate`
    and `report`. It trains, scores every run right after training (nothing for `prepare`, no backfills, so no
    `reproduces` check), a run trains in runs/<key values but the seed>/seed<S>, and a failed run's row carries
    the architecture where results.csv has such a column. A study that sets `training_curves` (`keep_curves()`) has
    every run's training loss recorded there by the engine, kept after the run folder is gone (a name of its own:
    a study's other curves, such as compare's held-out ones, are not the engine's to add to)."""

    results: ResultTable  # set by the subclass
    trains = True
    backfills: tuple[Backfill, ...] = ()
    reproduces = None  # no check of a retrained run against its row (see Study.reproduces)
    training_curves: ResultTable | None = None  # the training loss at every logged update of every run

    def __init__(self, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None):
        self.out, self.runs, self.scale, self.overrides = Path(out), Path(runs), scale, overrides or {}
        self._configs: dict[tuple, Any] = {}  # config_once's

    def folder(self, key: dict) -> Path:
        return self.runs.joinpath(*(str(v) for k, v in key.items() if k != "seed"), f"seed{key['seed']}")

    def failure_key(self, key: dict, config) -> dict:
        if "arch" in self.results.columns and "arch" not in key:  # the key alone would not say what failed
            return {**key, "arch": config.model.arch}
        return key

    def prepare(self, plan: list[dict], log) -> None:
        pass  # every score of a run is taken right after it trains

    def run_files(self, key: dict) -> list[str]:
        return []  # a run's scores are rows of the study's tables

    def timed_like(self, key: dict) -> tuple[dict, float] | None:
        return None  # a setting is timed by its own finished seeds only

    def config_once(self, key: dict, build: Callable[[], Any]):
        """build() once per run key, then the same config (the engine asks for it when planning and again when
        training; a study whose configs are slow to build keeps them). An error is raised again on every call."""
        name = tuple((k, str(v)) for k, v in key.items())
        if name not in self._configs:
            self._configs[name] = build()
        return self._configs[name]

    def per_run(self, name: str, by: str, values: Sequence[str]) -> ResultTable:
        """A CSV of several rows per run, <out>/<name>: the run's key columns, `by` (what varies within a run: a
        test-time depth, a test length, an update ...) and the `values`, keyed by the run's key and `by`."""
        key = [*self.results.key, by]
        return ResultTable(self.out / name, [*key, *values], key)

    def keep_curves(self) -> Backfill:
        """Keep every run's training loss in <out>/curves.csv (`training_curves`: the engine adds a run's curve
        when it has trained); the Backfill that takes it from the folders of runs that finished without it."""
        self.training_curves = curves = self.per_run("curves.csv", "step", ["loss"])
        return Backfill("training curve", curves,
                        lambda key, last: curves.add_many(RunSummary.read(self.folder(key)).curve(key)))


# --- the registry ------------------------------------------------------------------------------------------------
_STUDIES: dict[str, StudySpec] = {}
BUILTIN_MODULES = ("board_study", "clw_study", "depth_study", "drt_study", "rlt_study")
ENTRY_POINT_GROUP = "looped.studies"


def register_study(spec: StudySpec | Callable[[], StudySpec]):
    """Add a study (a spec, or a function returning one: usable as a decorator). Returns its argument."""
    built = spec() if callable(spec) and not isinstance(spec, StudySpec) else spec
    if built.name in _STUDIES:
        raise ValueError(f"study {built.name!r} is already registered")
    _STUDIES[built.name] = built
    return spec


def _load() -> None:
    from ..models.registry import load_plugins  # LOOPED_PLUGINS may register studies as well as architectures

    for module in BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.{module}")
    load_plugins()
    for value in _entry_points():
        importlib.import_module(value.split(":")[0])


@functools.cache
def _entry_points() -> tuple[str, ...]:
    return tuple(ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP))


def study_names() -> list[str]:
    _load()
    return list(_STUDIES)


def get_study(name: str) -> StudySpec:
    _load()
    if name not in _STUDIES:
        raise ValueError(f"unknown study {name!r} (known: {', '.join(_STUDIES)})")
    return _STUDIES[name]


# --- planning ----------------------------------------------------------------------------------------------------
def plan_keys(spec: StudySpec, scale: str, select: Mapping[str, Iterable] | None = None,
              only: Sequence[dict] = ()) -> list[dict]:
    """Every run's key in training order: `only` as given (`parse_runs`: whole runs named on the command line);
    else the spec's default plan when no axis is selected (and it has one), else the product of the axes
    (selected values, or each axis's default), without what `keep` drops."""
    if only:
        return list(only)
    select = {name: tuple(values) for name, values in (select or {}).items() if values}
    planned = spec.default_plan(scale) if not select and spec.default_plan is not None else None
    if planned is not None:
        return planned
    values = [select.get(axis.name) or axis.defaults(scale) for axis in spec.axes]
    keys = (dict(zip([axis.name for axis in spec.axes], combo)) for combo in itertools.product(*values))
    return [key for key in keys if spec.keep(key, scale)]


def parse_select(spec: StudySpec, given: Mapping[str, Iterable[str] | None], scale: str) -> dict[str, tuple]:
    """Command-line axis values (by axis name; None = not given) as key values, checked against the axes."""
    unknown = set(given) - {axis.name for axis in spec.axes}
    if unknown:
        raise ValueError(f"study {spec.name}: no axis {sorted(unknown)[0]!r}")
    return {axis.name: axis.parse(given[axis.name], scale) for axis in spec.axes if given.get(axis.name)}


def parse_runs(spec: StudySpec, labels: Iterable[str], scale: str) -> list[dict]:
    """`--only`'s runs as keys, in the order given: each a label as --status and the logs write it
    ("graph / drt / 1.0 / 43"; spaces optional), every part checked by its axis. A lane books one list of runs
    that no product of axis values spans (two seeds of one recipe, one of another)."""
    shape = " / ".join(axis.name for axis in spec.axes)
    keys: list[dict] = []
    for label in labels:
        parts = [part.strip() for part in str(label).split("/")]
        if len(parts) != len(spec.axes):
            raise ValueError(f"--only {label!r}: a run of study {spec.name} is {shape} (as --status lists it)")
        try:
            key = {axis.name: axis.parse([part], scale)[0] for axis, part in zip(spec.axes, parts)}
        except ValueError as err:
            raise ValueError(f"--only {label!r}: {err}") from None
        if not spec.keep(key, scale):
            raise ValueError(f"--only {label!r}: study {spec.name} does not run this combination")
        if key not in keys:
            keys.append(key)
    return keys


def runnable(study: Study, keys: list[dict], log, named: bool = False) -> list[dict]:
    """The keys whose run exists (a combination the architecture cannot take is logged and left out). When no
    planned run can be built (a --set that fits none of them, `--set train=3`), that is an error, not a study that
    trains nothing and exits 0; so is any run that cannot be built when the keys were `named` one by one
    (--only)."""
    kept, first_error = [], None
    for key in keys:
        try:
            study.config(key)
        except ConfigError as err:
            if named:
                raise ConfigError(f"--only {run_label(key)!r}: {err}") from None
            log(f"== {run_label(key)} skipped ({err})")
            first_error = first_error or err
            continue
        kept.append(key)
    if first_error is not None and not kept:
        raise ConfigError(f"no planned run can be built: {first_error}")
    return kept


# --- one run -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSummary:
    """What a study needs of a finished run: from the trainer's return value when it trained in this process,
    from its last checkpoint when it had finished before; the validation curve from its metrics.jsonl."""

    folder: Path
    seconds: float  # training wall time in this process (finished before this call: the trainer's logged clock)
    updates: int
    best_step: int | None
    targets: int  # training targets seen
    evaluations: tuple[dict, ...]  # every validation record, in step order
    losses: tuple[tuple[int, float], ...] = ()  # (update, training loss) at every logged update, in update order
    scoring_since: float | None = None  # time.perf_counter() when the engine handed the run to `evaluate`

    @classmethod
    def read(cls, folder: Path, seconds: float = 0.0, returned: dict | None = None) -> RunSummary:
        meta = ckpt.trainer_meta(ckpt.run_checkpoint(folder))
        if returned is not None:  # the trainer's own account; the checkpoint's agrees (it was just written)
            meta = {**meta, "step": returned["step"], "best_step": returned["best_step"]}
        path = Path(folder) / "metrics.jsonl"
        logged = read_metrics(path) if path.exists() else []
        events = [e for e in logged if any(k.startswith("val_") for k in e)]
        losses = {e["step"]: e["loss"] for e in logged if "loss" in e}  # an update logged twice (resumed): last wins
        if not seconds:  # scored by a later process (a crash after training ...): the trainer's own clock, summed
            seconds = next((e["seconds"] for e in reversed(logged) if "seconds" in e), 0.0)  # over its processes
        return cls(Path(folder), seconds, int(meta["step"]), meta.get("best_step"), int(meta.get("targets", 0)),
                   tuple(events), tuple(sorted(losses.items())))

    def cells(self, model) -> dict:
        """The results.csv cells every study records of a finished run (a table keeps the columns it has): its
        cost (eval_seconds: scoring so far, called last in `evaluate`), and the selected checkpoint's validation
        metrics (val_loss ...) as 6-decimal cells."""
        per_update = f"{self.seconds / self.updates:.3f}" if self.seconds and self.updates else ""
        scoring = f"{time.perf_counter() - self.scoring_since:.1f}" if self.scoring_since is not None else ""
        validation = {name: cell(value) for name, value in self.best_validation.items() if name.startswith("val_")}
        return {"parameters": model.parameter_counts()["total"], "updates": self.updates, "best_step": self.best_step,
                "train_seconds": f"{self.seconds:.1f}", "seconds_per_update": per_update, "eval_seconds": scoring,
                **validation, "status": "ok"}

    def curve(self, key: dict) -> list[dict]:
        """The rows of a training-loss curve table (curves.csv): the loss at every logged update, 6 decimals."""
        return [{**key, "step": step, "loss": f"{loss:.6f}"} for step, loss in self.losses]

    @property
    def best_validation(self) -> dict:
        """The validation record of the selected (best) checkpoint, {} when there is none."""
        return next((e for e in self.evaluations if e["step"] == self.best_step and "val_loss" in e), {})

    def last(self, metric: str):
        """The last recorded value of a validation metric (None when never recorded)."""
        values = [e[metric] for e in self.evaluations if e.get(metric) is not None]
        return values[-1] if values else None


def train_run(config, folder: Path, progress: bool, log) -> RunSummary:
    """Train (or resume) one run to its budget; its summary (no training when it had already finished)."""
    if ckpt.run_finished(folder):
        return RunSummary.read(folder)
    start = time.perf_counter()
    returned = Trainer(config, folder, resume="auto", progress=progress, log=log).run()
    return RunSummary.read(folder, time.perf_counter() - start, returned)


def train_or_record_failure(results: ResultTable, key: dict, config, folder: Path, progress: bool,
                            log) -> RunSummary | None:
    """train_run; when training cannot go on (a non-finite loss ...) the run becomes a `failed: ...` line in
    `results` (recorded, not hidden: the table shows it) and None is returned."""
    try:
        return train_run(config, folder, progress, log)
    except TrainingInterrupted:  # Ctrl-C: the run is checkpointed, not failed; the study stops here
        raise
    except TrainingError as err:
        log(f"run failed: {err}")
        results.add({**key, "status": f"failed: {str(err).splitlines()[0]}"})
        return None


def execution(config) -> str:
    """How a run executes beyond `results.machine()`, for its row's machine cell: "compiled" or ""."""
    return "compiled" if getattr(getattr(config, "train", None), "compile", False) else ""


def score_run(study: Study, key: dict, config, run: RunSummary, log) -> None:
    """Record a run that has trained: its training loss (a study that keeps curves: kept past the run folder),
    then the study's scores and its results.csv row (`evaluate`)."""
    if getattr(study, "training_curves", None) is not None:
        study.training_curves.add_many(run.curve(key))
    study.evaluate(key, config, replace(run, scoring_since=time.perf_counter()), log)


# --- a study call -----------------------------------------------------------------------------------------------
def build(spec: StudySpec | str, out: Path, runs: Path, *, scale: str = "cpu", overrides: dict | None = None,
          **options) -> Study:
    spec = get_study(spec) if isinstance(spec, str) else spec
    if scale not in spec.scales:
        raise ValueError(f"study {spec.name}: unknown scale {scale!r} (known: {', '.join(spec.scales)})")
    flags = {flag.name: flag.default for flag in spec.flags}
    return spec.build(Path(out), Path(runs), scale=scale, overrides=overrides, **{**flags, **options})


def status(spec: StudySpec | str, out: Path, runs: Path, *, scale: str = "cpu", select: Mapping | None = None,
           only: Sequence[dict] = (), overrides: dict | None = None, log=lambda message: None, **options) -> str:
    """`looped reproduce NAME --status [--set K=V]`: every planned run as done / failed / to do (trains nothing),
    and why a run with these --set overrides would be refused."""
    spec = get_study(spec) if isinstance(spec, str) else spec
    study = build(spec, out, runs, scale=scale, overrides=overrides, **options)
    plan = runnable(study, plan_keys(spec, scale, select, only), log, named=bool(only))
    try:
        check_same_settings(study.results, overrides_text(overrides))
        refused = ""
    except ValueError as error:
        refused = f"refused: {error}\n"
    return (status_report(study.results, plan, f"{spec.name} {scale}", study.folder, timing(study)) + refused
            + retrain_status(study, plan))


def run_study(spec: StudySpec | str, out: Path, runs: Path, *, scale: str = "cpu", select: Mapping | None = None,
              only: Sequence[dict] = (), overrides: dict | None = None, progress: bool = True,
              stop_after: float | None = None, finish_within: float | None = None, log=print,
              **options) -> ResultTable:
    """Train, evaluate and report every planned run of a registered study not yet in its results."""
    spec = get_study(spec) if isinstance(spec, str) else spec
    study = build(spec, out, runs, scale=scale, overrides=overrides, **options)
    plan = runnable(study, plan_keys(spec, scale, select, only), log, named=bool(only))
    return execute(study, plan, overrides=overrides, progress=progress, stop_after=stop_after,
                   finish_within=finish_within, log=log, title=f"{spec.name} {scale}",
                   report=lambda: write_report(spec, study, scale))


def timing(study: Study):
    """The study's `timed_like` (a study written before the method existed has none: its own seeds time it)."""
    return getattr(study, "timed_like", None)


def write_report(spec: StudySpec, study: Study, scale: str = "cpu") -> None:
    """The study's tables and plots, then its claims.md (the spec's claims judged from the same CSVs)."""
    study.report()
    if spec.claims is not None:
        spec.claims.write(study.results.path.parent, scale)


def execute(study: Study, plan: list[dict], *, overrides: dict | None = None, progress: bool = True,
            stop_after: float | None = None, finish_within: float | None = None, log=print, title: str = "",
            report: Callable[[], None] | None = None) -> ResultTable:
    """Train, evaluate and report every run of `plan` not yet in `study.results`, rewriting the report after
    each (also used by `looped compare`, whose plan comes from its options, not from a spec). Rows record the
    --set overrides; a run whose table holds rows of other settings is refused (a call with nothing left to
    train only rewrites the report)."""
    settings = overrides_text(overrides)
    study.results.stamp = {OVERRIDES: settings}
    backfill(study, log)
    study.prepare(plan, log)
    pending = pending_runs(plan, study.results, stop_after=stop_after, finish_within=finish_within,
                           timed_like=timing(study), log=log)
    for key in pending if study.trains else ():
        check_same_settings(study.results, settings)
        log(f"== {study.label(key) if hasattr(study, 'label') else f'{title}: {run_label(key)}'}")
        config, folder = study.config(key), study.folder(key)
        study.results.execution = execution(config)
        run = train_or_record_failure(study.results, study.failure_key(key, config), config, folder, progress, log)
        if run is not None:
            score_run(study, key, config, run, log)
            (report or study.report)()
    (report or study.report)()
    return study.results


# --- recipes ----------------------------------------------------------------------------------------------------
def write_recipes(spec: StudySpec | str, root: Path | None = None) -> list[Path]:
    """Write every recipe of a study under `root` (default configs/<name> of the current directory)."""
    spec = get_study(spec) if isinstance(spec, str) else spec
    root = Path(root) if root is not None else Path("configs") / spec.name
    written = []
    for recipe in spec.recipes():
        path = root / recipe.path
        atomic_write_text(path, recipe.header + yaml.safe_dump(recipe.config, sort_keys=False))
        written.append(path)
    return written


__all__ = ["DIFFERS", "REPLACED", "REPRODUCES", "RETRAINED", "RETRAINING", "Axis", "Backfill", "Booking", "Flag",
           "RunSummary", "Study", "StudyBase", "StudySpec", "backfill", "backfill_checkpoint", "build", "claim_path",
           "execute", "get_study", "grouped_plan", "owed_retrains", "parse_runs", "parse_select", "pending_runs",
           "plan_keys", "register_study", "retrain_status", "retrain_verdict", "run_study", "status", "status_report",
           "study_names", "unit_interval", "write_recipes", "write_report"]
