"""Evaluation exactly as seed 000 eq. 9, and sampling on the incremental state."""

import math

import pytest
import torch
import torch.nn.functional as F

from looped.eval import evaluate_lm
from looped.infer import decode_byte_text, encode_byte_text, generate, sample_next
from looped.models import build_model, get_arch


@pytest.fixture
def model():
    torch.manual_seed(0)
    return build_model(get_arch("transformer").tiny_config(context_length=40)).eval()


def test_eval_is_eq_9_including_the_short_last_batch(model):
    blocks = torch.randint(0, 257, (5, 41))
    result = evaluate_lm(model, blocks, batch_size=2)  # batches of 2, 2, 1
    with torch.no_grad():
        nll = F.cross_entropy(model(blocks[:, :-1]).flatten(0, 1), blocks[:, 1:].flatten(), reduction="sum")
    assert result["targets"] == 5 * 40 and result["blocks"] == 5
    assert result["nll"] == pytest.approx(nll.item() / 200, rel=1e-6)
    assert result["ppl"] == pytest.approx(math.exp(result["nll"]))
    assert result["bits_per_byte"] == pytest.approx(result["nll"] / math.log(2))
    partial = evaluate_lm(model, blocks, batch_size=2, max_batches=1)
    assert partial["blocks"] == 2 and partial["targets"] == 80


def test_by_position_buckets_double_and_average_to_the_total(model):
    blocks = torch.randint(0, 257, (5, 41))  # 40 targets per block
    result = evaluate_lm(model, blocks, batch_size=2, by_position=True)
    buckets = result["by_position"]
    assert [(b["first"], b["last"]) for b in buckets] == [(1, 1), (2, 3), (4, 7), (8, 15), (16, 40)]
    with torch.no_grad():
        per_position = F.cross_entropy(model(blocks[:, :-1]).transpose(1, 2), blocks[:, 1:], reduction="none").mean(0)
    assert buckets[3]["nll"] == pytest.approx(per_position[7:15].mean().item(), rel=1e-5)
    weighted = sum(b["nll"] * (b["last"] - b["first"] + 1) for b in buckets) / 40
    assert weighted == pytest.approx(result["nll"], rel=1e-5)
    assert buckets[0]["bits"] == pytest.approx(buckets[0]["nll"] / math.log(2))
    assert "by_position" not in evaluate_lm(model, blocks)


def test_wikitext_unit_is_per_symbol(model):
    result = evaluate_lm(model, torch.randint(0, 257, (2, 41)), unit="symbol")
    assert "bits_per_symbol" in result and "bits_per_byte" not in result


def test_greedy_generation_equals_full_forward_argmax(model):
    prompt = torch.randint(0, 256, (2, 5))
    out = generate(model, prompt, 12, temperature=0)
    seq = prompt
    with torch.no_grad():
        for _ in range(12):  # recompute the whole prefix every token: the slow reference
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)


def test_seeded_sampling_is_reproducible_and_respects_top_k(model):
    prompt = encode_byte_text("abc")
    a = generate(model, prompt, 20, temperature=1.0, top_k=3, seed=7)
    b = generate(model, prompt, 20, temperature=1.0, top_k=3, seed=7)
    assert torch.equal(a, b) and a.shape == (1, 23)
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0, 3.0]])
    draws = {int(sample_next(logits, top_k=2, generator=torch.Generator().manual_seed(s))) for s in range(50)}
    assert draws <= {1, 2} and len(draws) == 2


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    draws = {int(sample_next(logits, top_p=0.75, generator=torch.Generator().manual_seed(s))) for s in range(200)}
    assert draws == {0, 1}  # 0.5 < 0.75 <= 0.5 + 0.3


def test_generation_slides_the_window_past_the_context(model):
    # context 40: the window restarts from the last 20 tokens whenever 40 positions are held
    prompt = torch.randint(0, 256, (2, 45))  # longer than the window: only its last 40 tokens are read
    out = generate(model, prompt, 70, temperature=0)
    seq, start = prompt, 45 - 40
    with torch.no_grad():
        for _ in range(70):  # the slow reference: recompute the current window every token
            seq = torch.cat([seq, model(seq[:, start:])[:, -1].argmax(-1, keepdim=True)], 1)
            if seq.shape[1] - 1 - start >= 40:  # the state held a full window before this token
                start = seq.shape[1] - 20
    assert out.shape == (2, 115) and torch.equal(out, seq)


def test_generation_errors(model):
    with pytest.raises(ValueError, match="sequence too long"):
        generate(model, encode_byte_text("x" * 30), 20, slide=False)
    with pytest.raises(ValueError, match="at least one token"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="out of range"):
        generate(model, torch.tensor([[300]]), 3)


def test_text_round_trip():
    assert decode_byte_text(encode_byte_text("héllo")[0].tolist()) == "héllo"
    assert decode_byte_text([104, 256, 105]) == "h\ni"


def test_eval_with_early_exit_reports_rounds_and_is_batch_independent():
    torch.manual_seed(0)
    loop = build_model(get_arch("shared_loop").tiny_config()).eval()
    blocks = torch.randint(0, 257, (3, 41))
    a = evaluate_lm(loop, blocks, batch_size=1, exit_threshold=0.05, rounds=4)
    b = evaluate_lm(loop, blocks, batch_size=3, exit_threshold=0.05, rounds=4)
    assert 1 <= a["mean_rounds_used"] <= 4
    assert a["nll"] == pytest.approx(b["nll"], rel=1e-6) and a["mean_rounds_used"] == b["mean_rounds_used"]
    full = evaluate_lm(loop, blocks, exit_threshold=0.0, rounds=4)
    assert full["mean_rounds_used"] == 4 and full["nll"] == pytest.approx(evaluate_lm(loop, blocks, rounds=4)["nll"])


def test_compressor_rates_separate_redundant_from_random_bytes():
    from looped.eval.compressors import compressor_bits_per_byte

    redundant = compressor_bits_per_byte(b"In the beginning God created the heaven and the earth. " * 200)
    noise = compressor_bits_per_byte(bytes(torch.randint(0, 256, (20_000,), generator=torch.Generator().manual_seed(0))
                                           .tolist()))
    assert set(redundant) == {"gzip -9", "bzip2 -9", "xz -9e"}
    assert max(redundant.values()) < 0.5 and min(noise.values()) > 7.9  # random bytes do not compress
    with pytest.raises(ValueError, match="empty"):
        compressor_bits_per_byte(b"")


def test_the_decoding_loop_stops_rows_pads_them_and_consumes_all_but_the_last_token(model):
    from looped.infer import SamplingPolicy, decode_loop

    prompt = torch.randint(0, 256, (3, 4))
    greedy = generate(model, prompt, 6, temperature=0)[:, 4:]  # (3, 6) the reference continuation
    stop = int(greedy[0, 1])  # row 0 stops at its second token; rows that never sample it run to the end
    state = model.init_state(3)
    logits = model.decode(prompt, state)[:, -1]
    out = decode_loop(model, state, logits, 6, SamplingPolicy(temperature=0), stop_token=stop, pad_token=0,
                      record_log_probs=False)
    for row in range(3):
        hits = (greedy[row] == stop).nonzero()
        end = int(hits[0]) + 1 if len(hits) else 6  # tokens up to and including the stop token are actions
        assert torch.equal(out.tokens[row, :end], greedy[row, :end]) and bool(out.actions[row, :end].all())
        assert bool((out.tokens[row, end:] == 0).all()) and not bool(out.actions[row, end:].any())
    assert out.consumed == out.tokens.shape[1] - 1 == state.position - 4  # the last sampled token is not fed back
    with pytest.raises(ValueError, match="behaviour log-probabilities"):
        SamplingPolicy(temperature=0).log_probs(logits, logits.argmax(-1))


def test_capabilities_a_model_lacks_are_one_line_errors(model):
    """The plain Transformer has no early exit and cannot save its decode state: the protocol's defaults say so
    in one line instead of an AttributeError deep in a command."""
    assert not model.saves_state
    with pytest.raises(ValueError, match="has no early exit") as err:
        evaluate_lm(model, torch.randint(0, 257, (2, 41)), exit_threshold=0.01)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="cannot save its decode state"):
        model.state_to_tensors(model.init_state(1))
