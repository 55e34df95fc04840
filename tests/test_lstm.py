"""The LSTM calibration row (looped.models.lstm); the shared drivers cover causality and decoding."""

import torch

from looped.models import build_model, get_arch


def test_the_input_token_moves_the_state_at_init():
    # With the Transformers' embedding std 0.02 the first step's output hardly depended on the token (max
    # difference ~0.01): the row could not fit parity at the study's budget. Unit-scale inputs move it by ~0.1+.
    torch.manual_seed(0)
    model = build_model(get_arch("lstm").config())
    tokens = torch.arange(20).view(20, 1)  # 20 different first tokens, one per row
    out, _ = model.lstm(model.embed(tokens))
    spread = (out[:, 0] - out[:, 0].mean(0)).abs().amax()
    assert spread > 0.1, f"first-step outputs differ by at most {spread:.4f} across tokens"
