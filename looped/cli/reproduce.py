"""`looped reproduce <study>`: one sub-command per paper's study; each study declares its own options.

    looped reproduce clw --scale cpu [--budget small|medium] [--seeds ...] [--rows ...] [--corpora ...]
    looped reproduce drt --scale cpu [--tasks ...] [--archs ...] [--alphas ...]
    looped reproduce rlt --scale cpu [--tasks ...] [--rows ...]
    looped reproduce <study> ... --status | --stop-after MINUTES | --set KEY=VALUE

A study module offers `add_reproduce_arguments(parser)` and `reproduce(args)`; a new paper is one more entry
of STUDIES.
"""

from __future__ import annotations

import importlib


# study name -> (module under looped.experiments, help)
STUDIES = {
    "clw": ("clw_study", "seed 000: the seven rows x corpora x seeds, held-out scores, rounds and early exit"),
    "drt": ("drt_study", "seed 002: depth-recurrent core and baselines on graph / logic / family"),
    "rlt": ("rlt_study", "seed 003: RLT rows on the algorithmic tasks, accuracy over the test-length grids"),
}


def study_module(name: str):
    return importlib.import_module(f"looped.experiments.{STUDIES[name][0]}")


def add_commands(sub) -> None:
    """Add `reproduce` with one sub-command per study."""
    p = sub.add_parser("reproduce", help="run a paper's grid of runs (resumable) and write tables and plots")
    studies = p.add_subparsers(dest="paper", required=True, metavar="{" + ",".join(STUDIES) + "}")
    for name, (_, help_) in STUDIES.items():
        module = study_module(name)
        parser = studies.add_parser(name, help=help_, description=help_)
        module.add_reproduce_arguments(parser)
        parser.set_defaults(func=module.reproduce)
