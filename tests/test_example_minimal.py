"""examples/train_minimal.py (issue 28 part 5): the one-file training script runs top to bottom at toy size."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "train_minimal.py"
TINY = ["--steps", "3", "--batch-size", "4", "--context", "48", "--dim", "16", "--heads", "2", "--ffn-dim", "32",
        "--rounds", "2", "--eval-blocks", "8"]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_minimal", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("arch", ["shared_loop", "workspace"])
def test_it_trains_scores_and_samples_the_requested_length(script, arch, capsys):
    result = script.main([*TINY, "--arch", arch, "--sample-bytes", "30", "--prompt", "In the"])
    out = capsys.readouterr().out
    bits = float(re.search(r"held-out bits/byte: (\S+) \(8 blocks, 384 bytes scored\)", out).group(1))
    assert math.isfinite(bits) and bits == pytest.approx(result["bits_per_byte"], abs=1e-4)
    assert re.search(r"^sample \(30 bytes\): In the", out, re.M) and len(result["sample"]) == 30
    assert re.findall(r"^step +(\d+)", out, re.M) == ["0", "2"]  # the first and the last update are printed


def test_a_sample_longer_than_the_context_is_refused_before_training(script, capsys):
    with pytest.raises(SystemExit) as stop:
        script.main([*TINY, "--sample-bytes", "60"])
    assert stop.value.code == 2
    assert "must fit --context (48 bytes)" in capsys.readouterr().err
