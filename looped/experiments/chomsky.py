"""Published figures of the Chomsky-hierarchy suite (looped/data/tasks/chomsky.py), to stand beside our rows.

Source: G. Delétang, A. Ruoss, J. Grau-Moya, T. Genewein, L. K. Wenliang, E. Catt, C. Cundy, M. Hutter, S. Legg,
J. Veness, P. A. Ortega, "Neural Networks and the Chomsky Hierarchy", ICLR 2023, arXiv 2207.02098, Table 2:
score (%) = per-token output accuracy averaged over test lengths 41..500, the best over 10 seeds x 3 learning rates
(and, for the Transformer encoder, five positional encodings), after 1,000,000 Adam steps on lengths 1..40.

Where the numbers were read (only what was found is filled in; None means "not found here", never a guess):
  * The paper's own text (Appendix B.3.2) gives the Transformer's Cycle Navigation score, 61.9.
  * Table 2 itself was not readable here. Its RNN / Stack-RNN / Tape-RNN / Transformer / LSTM columns for six of
    our tasks are reprinted in Table 5 of Xu et al., "DeltaFormer: Unlock the State Space of Transformer"
    (ByteDance Seed), beside their own DeltaFormer column; the Transformer and LSTM values below come from it.
  * The text also says (Section 5.3, Appendix B.1) that LSTMs solve every regular task on every seed and Bucket
    Sort "almost perfectly", and (Section 5.4) that Transformers solve Even Pairs and Bucket Sort; those claims
    are no numbers, so their cells stay None.
  * The six tasks added with issue 31 §2.2's second part (modular_arithmetic, solve_equation, missing_duplicate,
    odds_first, binary_multiplication, compute_sqrt): Table 2 was still not readable here (the stored copies of
    the paper hold its opening pages only) and no reprint of their rows was found, so all twelve cells are None.

Note the paper's Transformer is a bidirectional encoder reading the whole input and the ∅ tokens; our rows are
causal, which the ∅ format makes fair (every output position sees the whole input) but not identical.
"""

from __future__ import annotations

PUBLISHED_STEPS = 1_000_000  # their training budget (Adam steps) behind every published figure
CITATION = ("Delétang et al., Neural Networks and the Chomsky Hierarchy, ICLR 2023 (arXiv 2207.02098), Table 2; "
            "see looped/experiments/chomsky.py for where each figure was read")

# task -> {"transformer": score %, "lstm": score %}; None = not found here.
PUBLISHED: dict[str, dict[str, float | None]] = {
    "even_pairs": {"transformer": None, "lstm": None},  # not found here
    "parity_check": {"transformer": 52.0, "lstm": 100.0},
    "cycle_navigation": {"transformer": 61.9, "lstm": None},  # LSTM: not found here
    "modular_arithmetic_simple": {"transformer": 24.2, "lstm": 100.0},
    "stack_manipulation": {"transformer": 57.5, "lstm": 59.1},
    "reverse_string": {"transformer": 62.3, "lstm": 60.9},
    "modular_arithmetic": {"transformer": None, "lstm": None},  # not found here
    "solve_equation": {"transformer": None, "lstm": None},  # not found here
    "duplicate_string": {"transformer": 52.8, "lstm": 57.6},
    "missing_duplicate": {"transformer": None, "lstm": None},  # not found here
    "odds_first": {"transformer": None, "lstm": None},  # not found here
    "binary_addition": {"transformer": None, "lstm": None},  # not found here
    "binary_multiplication": {"transformer": None, "lstm": None},  # not found here
    "compute_sqrt": {"transformer": None, "lstm": None},  # not found here
    "bucket_sort": {"transformer": None, "lstm": None},  # not found here
}


def published_row(task: str) -> dict[str, float | None] | None:
    """The paper's Transformer / LSTM scores (%) for one suite task; None for a task outside the suite."""
    return PUBLISHED.get(task)


__all__ = ["CITATION", "PUBLISHED", "published_row"]
