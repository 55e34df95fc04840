"""examples/study_plugin.py: a study added in one file, as a plugin, gets the engine and the shared drivers."""

from __future__ import annotations

from pathlib import Path

import pytest

import study_drivers
from looped.experiments import study as engine

PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "study_plugin.py"


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.setenv("LOOPED_PLUGINS", str(PLUGIN))
    assert "feedback_parity" in engine.study_names()
    return "feedback_parity"


def test_a_plugin_study_trains_resumes_and_reports_at_toy_size(plugin, tmp_path, monkeypatch):
    study_drivers.check_toy_run_resumes_and_never_trains_twice(plugin, tmp_path, monkeypatch)
    table = (tmp_path / "results" / "table.md").read_text()
    assert "| plain |" in table and "| rlt1 |" in table and "(n=1)" in table


def test_a_plugin_study_has_a_reproduce_command_with_status_and_recipes(plugin, tmp_path, capsys):
    study_drivers.check_status_lists_every_planned_run(plugin, tmp_path, capsys)
    written = engine.write_recipes(plugin, tmp_path / "configs")
    assert sorted(p.name for p in written) == ["plain.yaml", "rlt1.yaml"]
    from looped.train import load_run_config

    assert load_run_config(tmp_path / "configs" / "rlt1.yaml").model.feedback_interval == 1
