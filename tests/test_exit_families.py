"""Early exit in a batch for the other exit families (exit_gate_loop, prelude_coda; looped/models/loop_exit.py):
each row of a batch gets the logits, rounds used and caches it gets decoded alone, and those of the per-position
rule the single-row path ran before batching, which computed every position through every step and froze the
exited ones with a mask (written out here as the oracle)."""

import pytest
import torch

from test_loop_exit import ROUNDS, batch_and_threshold, check_decoding, check_scoring, decode_all, where_active

from lm_drivers import tiny_model


def gate_dense_rule(model, tokens, state, threshold):
    """exit_gate_loop before batching: logits (b, n, vocab), steps used (b, n)."""
    h = model.embed(tokens)
    active = torch.ones(tokens.shape, dtype=torch.bool)
    used = torch.zeros(tokens.shape, dtype=torch.long)
    survive = torch.ones(tokens.shape, dtype=torch.float32)
    logits = None
    for t in range(ROUNDS):
        h = where_active(active, model.cached_step(h, state.caches[t] if state else None), h)
        used += active.long()
        step_logits, lam = model.readout(h)
        logits = step_logits if logits is None else where_active(active, step_logits, logits)
        survive = survive * (1 - lam.float())
        active = active & ~(1 - survive > threshold)
    return logits, used


def coda_dense_rule(model, tokens, state, threshold):
    """prelude_coda before batching: logits (b, n, vocab), iterations used (b, n). A state made without a
    threshold keeps one set of coda caches; this rule reads out every iteration, so it gets one per iteration."""
    if state is not None and len(state.coda) < ROUNDS:
        state.coda += [[layer.attn.new_cache(state.batch, model.config.context_length) for layer in model.coda]
                       for _ in range(ROUNDS - len(state.coda))]
    e = model.prelude_output(tokens, state.prelude if state else None)
    s = model.initial_state(e)
    active = torch.ones(tokens.shape, dtype=torch.bool)
    used = torch.zeros(tokens.shape, dtype=torch.long)
    logits = log_probs = None
    for i in range(ROUNDS):
        s = where_active(active, model.core_step(e, s, state.core[i] if state else None), s)
        used += active.long()
        step_logits = model.readout(s, state.coda[i] if state else None)
        step_log_probs = step_logits.float().log_softmax(-1)
        if logits is not None:
            kl = (step_log_probs.exp() * (step_log_probs - log_probs)).sum(-1)
            step_logits = where_active(active, step_logits, logits)
            step_log_probs = where_active(active, step_log_probs, log_probs)
            active = active & (kl >= threshold)
        logits, log_probs = step_logits, step_log_probs
    return logits, used


FAMILIES = {"exit_gate_loop": (gate_dense_rule, (0.97, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)),
            "prelude_coda": (coda_dense_rule, (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4))}


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_scoring_a_batch_gives_each_row_the_dense_rule_and_its_own_alone(arch):
    check_scoring(tiny_model(arch), *FAMILIES[arch])


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_decoding_a_batch_leaves_each_row_the_logits_and_caches_it_has_alone(arch):
    check_decoding(tiny_model(arch), *FAMILIES[arch])


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_an_exited_position_skips_the_last_blocks_query_and_mlp_and_the_head(arch):
    """The saving itself: the last block of the step's stack (of the core and of the coda) runs its MLP once per
    round a position refined (sum of rounds used), not once per round of the loop. (The tiny models have 2 layers
    a step, or a core of 2 blocks: an exited position's first block still runs, for the keys of the second.)"""
    model = tiny_model(arch)
    x, threshold = batch_and_threshold(model, 5, *FAMILIES[arch])
    stacks = [model.layers] if arch == "exit_gate_loop" else [model.core, model.coda]
    seen = {id(stack): [] for stack in stacks}
    hooks = [stack[-1].mlp.register_forward_hook(lambda module, args, out, k=id(stack): seen[k].append(
        args[0].shape[:-1].numel())) for stack in stacks]
    with torch.no_grad():
        for run in (lambda: model.forward_early_exit(x, threshold, rounds=ROUNDS)[1],
                    lambda: decode_all(model, x, threshold)[1]):
            for counts in seen.values():
                counts.clear()
            used = run()
            for counts in seen.values():
                assert sum(counts) == int(used.sum()) < x.numel() * ROUNDS
    for hook in hooks:
        hook.remove()
