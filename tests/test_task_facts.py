"""A new reasoning task is its class and its registration (issue 28 part 3): the models' shapes, the training
set's size, the test budgets, the answer words and the task's other names are attributes of the task class,
read through the task registry, so a task registered here (a toy copy of the boolean task with facts of its
own) trains, answers `looped think` and shows examples with no table edited anywhere else."""

from __future__ import annotations

import dataclasses

import pytest

import looped.train.reasoning as rtask
from looped.cli import main
from looped.cli import reasoning as reasoning_cli
from looped.config import from_dict
from looped.data.tasks import TaskError, base, get_task, register_task, task_names
from looped.data.tasks.base import task_options
from looped.data.tasks.boolean import NestedBoolean
from looped.data.tasks.reasoning import reasoning_task_class
from looped.models import get_arch
from looped.train import RunConfig, Trainer


@pytest.fixture
def toy_task(monkeypatch):
    """`toy_boolean` (alias `toy_logic`) registered for one test: the registry is restored afterwards."""
    task_names()  # the built-in tasks go into the real registry before it is swapped for a copy
    monkeypatch.setattr(base, "_TASKS", dict(base._TASKS))
    monkeypatch.setattr(base, "_ALIASES", dict(base._ALIASES))

    @register_task("toy_boolean")
    class ToyBoolean(NestedBoolean):
        """The nested-boolean generator under facts that differ from every built-in task's."""

        paper_width = {"dim": 16, "heads": 2, "ffn_dim": 32}
        paper_train_size = 48
        eval_steps = (3, 1)
        difficulty_name = "toy depth"
        answer_words = ("yes", "no")
        aliases = {"toy_logic": {}}

    return ToyBoolean


def toy_config() -> dict:
    """The normal config path: the model section from `for_task`, the task section by name only."""
    model = get_arch("drt").config_cls.for_task("toy_logic", depth_rows=4, steps_range=[1, 2], dropout=0.0)
    return {
        "model": dataclasses.asdict(model),
        "task": {"kind": "reasoning", "name": "toy_boolean", "val_size": 8, "train_difficulties": [1, 2]},
        "optim": {"lr": 1e-3},
        "train": {"seed": 0, "batch_size": 8, "max_steps": 1, "eval_every": 0, "threads": 1},
    }


def test_a_task_registered_in_a_test_trains_and_answers_think(toy_task, tmp_path):
    config = from_dict(RunConfig, toy_config())
    model = config.model
    assert (model.input_kind, model.vocab_size, model.max_length) == ("tokens", 9, 128)  # the class's shape
    assert (model.dim, model.heads, model.ffn_dim) == (16, 2, 32)  # its paper_width, not boolean's 256 / 8 / 1024
    log = []
    summary = Trainer(config, tmp_path / "run", progress=False, log=log.append).run()
    assert summary["step"] == 1
    task, train, _ = rtask.training_data(config.task)
    assert type(task) is toy_task and len(train) == 48  # train_size defaults to the class's paper_train_size
    assert rtask.eval_steps(config.task) == [1, 3]

    answer = reasoning_cli.think(str(tmp_path / "run"), "(T&F)|T")
    assert [row["steps"] for row in answer["rows"]] == [1, 3]  # the class's eval_steps are the default budgets
    assert answer["reference"] == "yes" and {row["answer"] for row in answer["rows"]} <= {"yes", "no"}


def test_data_show_lists_a_registered_task_and_its_alias(toy_task, capsys):
    for name in ("toy_boolean", "toy_logic"):
        assert main(["data", "show", name, "--n", "2", "--difficulty", "2"]) == 0
        out = capsys.readouterr().out
        assert out.count(f"--- {name} example") == 2


def test_task_class_lookup_resolves_aliases_and_names_the_reasoning_tasks():
    assert reasoning_task_class("logic").name == "boolean"
    assert reasoning_task_class("graph_hard").difficulty_name == "hops"
    assert task_options("family_decued") == {"decued": True} and task_options("family") == {}
    assert get_task("family_decued").decued  # a study recipe's name builds its generator wherever a task is named
    with pytest.raises(TaskError, match=r"unknown reasoning task 'parity' \(known: boolean, family, graph\)"):
        reasoning_task_class("parity")  # a registered task, but not a reasoning one
    with pytest.raises(ValueError, match="task.name must be one of boolean, family, graph, got 'parity'"):
        from_dict(RunConfig, {"model": {"arch": "drt"}, "task": {"kind": "reasoning", "name": "parity"}})


def test_a_name_or_alias_cannot_be_registered_twice(toy_task):
    with pytest.raises(ValueError, match="'toy_logic' is already registered"):
        register_task("toy_other")(type("ToyOther", (NestedBoolean,), {"aliases": {"toy_logic": {}}}))
    with pytest.raises(ValueError, match="'toy_logic' is already registered"):
        register_task("toy_logic")(type("ToyOther", (NestedBoolean,), {"aliases": {}}))


# Seed 002's table, as the tables this replaced held it (train/reasoning.py, models/reasoning.py, cli/reasoning.py,
# experiments/drt.py): moving the facts onto the classes must not change one of them.
PAPER_FACTS = {
    "graph": ("graph", 27, 20, (128, 4, 256), 12_000, [1, 2, 3, 5, 8, 12, 15, 20], "hops",
              ("reachable", "unreachable")),
    "boolean": ("tokens", 9, 128, (256, 8, 1024), 64_000, [1, 2, 4, 6, 8, 10, 12, 16, 20, 24], "nesting depth",
                ("T", "F")),
    "family": ("tokens", 54, 128, (256, 8, 1024), 60_000, [1, 2, 4, 6, 8, 10, 12, 16, 20], "chain depth",
               ("true", "false")),
}


@pytest.mark.parametrize("name", sorted(PAPER_FACTS))
def test_the_built_in_tasks_keep_seed_002s_facts(name):
    cls = reasoning_task_class(name)
    shape = cls.task_shape()
    width = (shape["dim"], shape["heads"], shape["ffn_dim"])
    assert (shape["input_kind"], shape["vocab_size"], shape["max_length"], width, cls.paper_train_size,
            sorted(cls.eval_steps), cls.difficulty_name, cls.answer_words) == PAPER_FACTS[name]


def test_every_reasoning_architecture_configures_itself_for_every_reasoning_task():
    """`for_task` on each registered pair whose perception matches: the task's shape gives a valid config."""
    from looped.data.tasks.reasoning import reasoning_task_names
    from looped.models import arch_names

    pairs = 0
    for name in reasoning_task_names():
        cls = reasoning_task_class(name)
        for arch in arch_names("reasoning"):
            config_cls = get_arch(arch).config_cls
            if cls.input_kind in config_cls.input_kinds:
                config = config_cls.for_task(name)
                assert (config.input_kind, config.vocab_size) == (cls.input_kind, len(cls.vocab)), (name, arch)
                pairs += 1
    assert pairs >= 13  # 3 tasks x 4 attention models + the GNN on graph (a loaded plugin adds more)
