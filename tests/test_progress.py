"""Progress output: a live bar on a terminal, a few whole lines in a log; held-out scoring runs without autograd."""

import io

import torch

from looped.eval import evaluate_lm
from looped.eval.progress import LineProgress, progress_bar
from looped.models import build_model, get_arch


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_at_most_one_line_per_interval():
    stream, clock = io.StringIO(), FakeClock()
    bar = LineProgress(total=1000, desc="train", unit="upd", stream=stream, interval=5.0, clock=clock)
    for step in range(1000):  # 1000 updates over 20 seconds
        clock.now = step * 0.02
        bar.update(1)
        bar.set_postfix(loss=f"{2.0 - step / 1000:.3f}")
    bar.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert 4 <= len(lines) <= 5  # every 5 s of 20, and the final line
    assert lines[-1].startswith("train: 1000/1000 upd (100%)") and "loss=1.001" in lines[-1]


def test_a_non_terminal_stream_gets_lines_and_iteration_closes_the_bar():
    stream = io.StringIO()
    assert isinstance(progress_bar(total=3, stream=stream), LineProgress)
    items = list(progress_bar(range(3), total=3, desc="eval", stream=stream, interval=1e9))
    assert items == [0, 1, 2]
    assert stream.getvalue() == stream.getvalue().splitlines()[0] + "\n"  # one line, at the end
    assert stream.getvalue().startswith("eval: 3/3 it (100%)")


def test_held_out_scoring_runs_in_inference_mode_on_whole_blocks():
    model = build_model(get_arch("transformer").tiny_config())
    seen = []
    original = model.forward

    def recording_forward(tokens, **kwargs):
        seen.append((torch.is_inference_mode_enabled(), tuple(tokens.shape)))
        return original(tokens, **kwargs)

    model.forward = recording_forward
    blocks = torch.randint(0, 257, (5, 21))
    result = evaluate_lm(model, blocks, batch_size=2)
    assert seen == [(True, (2, 20)), (True, (2, 20)), (True, (1, 20))]
    assert result["targets"] == 5 * 20 and result["blocks"] == 5
    assert model.training  # the mode is restored
