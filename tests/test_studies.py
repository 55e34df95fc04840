"""The shared study drivers (tests/study_drivers.py) over every registered study, and the engine's own rules."""

from __future__ import annotations

import pytest

import study_drivers
from looped.experiments import study as engine

STUDIES = engine.study_names()


@pytest.mark.parametrize("name", STUDIES)
def test_toy_run_resumes_and_never_trains_twice(name, tmp_path, monkeypatch):
    study_drivers.check_toy_run_resumes_and_never_trains_twice(name, tmp_path, monkeypatch)


@pytest.mark.parametrize("name", STUDIES)
def test_status_lists_every_planned_run(name, tmp_path, capsys):
    study_drivers.check_status_lists_every_planned_run(name, tmp_path, capsys)


@pytest.mark.parametrize("name", STUDIES)
def test_shipped_recipes_are_generated(name, tmp_path):
    study_drivers.check_shipped_recipes_are_generated(name, tmp_path)


@pytest.mark.parametrize("name", STUDIES)
def test_committed_report_regenerates_byte_identically(name, tmp_path):
    if not study_drivers.check_committed_report_regenerates(name, tmp_path):
        pytest.skip(f"no committed results of study {name}")


@pytest.mark.parametrize("name", STUDIES)
def test_merging_the_committed_folder_into_an_empty_one_rebuilds_it(name, tmp_path):
    if not study_drivers.check_merge_into_an_empty_folder_rebuilds_the_committed_one(name, tmp_path):
        pytest.skip(f"no committed results of study {name}")


# --- the engine ------------------------------------------------------------------------------------------------
def _spec(**changes) -> engine.StudySpec:
    fields = dict(name="toy_plan", help="", build=lambda *a, **k: None, recipes=lambda: (),
                  axes=(engine.Axis("task", "tasks", ("a", "b"), ("a", "b", "c"), aliases={"A": "a"}),
                        engine.Axis("seed", "seeds", (1, 2), cell=int)))
    return engine.StudySpec(**{**fields, **changes})


def test_the_plan_is_the_product_of_the_axes_in_key_order_without_what_keep_drops():
    spec = _spec(keep=lambda key, scale: not (key["task"] == "b" and key["seed"] == 2))
    assert engine.plan_keys(spec, "cpu") == [{"task": "a", "seed": 1}, {"task": "a", "seed": 2},
                                             {"task": "b", "seed": 1}]
    assert engine.plan_keys(spec, "cpu", {"task": ("c",)}) == [{"task": "c", "seed": 1}, {"task": "c", "seed": 2}]
    # a default plan replaces the product only when no axis is chosen (DRT's CPU plan)
    spec = _spec(default_plan=lambda scale: [{"task": "c", "seed": 9}] if scale == "cpu" else None)
    assert engine.plan_keys(spec, "cpu") == [{"task": "c", "seed": 9}]
    assert len(engine.plan_keys(spec, "full")) == 4 and len(engine.plan_keys(spec, "cpu", {"seed": (1,)})) == 2


def test_command_line_values_are_checked_aliased_and_typed():
    spec = _spec()
    assert engine.parse_select(spec, {"task": ["A", "c"], "seed": ["3"], }, "cpu") == {"task": ("a", "c"),
                                                                                      "seed": (3,)}
    with pytest.raises(ValueError, match=r"^--tasks: unknown name 'z' \(known: a, b, c\)$"):
        engine.parse_select(spec, {"task": ["z"]}, "cpu")
    with pytest.raises(ValueError, match=r"^--seeds: 'x' is not an integer"):
        engine.parse_select(spec, {"seed": ["x"]}, "cpu")


def test_every_registered_study_has_a_reproduce_command_with_its_axes_as_options(capsys):
    from looped.cli import build_parser

    parser = build_parser()
    for name in STUDIES:
        with pytest.raises(SystemExit):
            parser.parse_args(["reproduce", name, "--help"])
        text = capsys.readouterr().out
        spec = engine.get_study(name)
        for option in ["--status", "--report", "--write-recipes", *(f"--{a.option}" for a in spec.axes)]:
            assert option in text, (name, option)


def test_a_study_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        engine.register_study(_spec(name="rlt"))


def test_a_failed_row_names_the_architecture_unless_the_key_already_does(tmp_path):
    """StudyBase.failure_key: a failed run must still say which architecture failed where arch is a column but
    not a key (RLT, CLW, board); a key holding arch (DRT) keeps its own value; a table without arch, the key."""
    from types import SimpleNamespace

    from looped.experiments.results import ResultTable

    config = SimpleNamespace(model=SimpleNamespace(arch="rlt_baseline"))

    def study(columns: list[str], key: list[str]) -> engine.StudyBase:
        built = engine.StudyBase(tmp_path, tmp_path / "runs")
        built.results = ResultTable(tmp_path / f"{'_'.join(columns)}.csv", columns, key)
        return built

    key = {"task": "parity", "seed": 1}
    named = study(["task", "seed", "arch", "status"], ["task", "seed"]).failure_key(key, config)
    assert named == {**key, "arch": "rlt_baseline"}
    assert study(["task", "seed", "status"], ["task", "seed"]).failure_key(key, config) == key
    keyed = {"task": "parity", "arch": "drt", "seed": 1}
    assert study(["task", "arch", "seed", "status"], ["task", "arch", "seed"]).failure_key(keyed, config) == keyed
