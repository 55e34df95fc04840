"""Compute ledgers of the seed 003 rows (looped/models/ledger.py): RLT-1 / RLT-2 / RLT-0 and the baseline.

Kept apart from rlt.py (which is at the size limit); the model classes bind these functions as `ledger`.

RLT's forward is `decode` from a fresh state whose caches hold exactly the sequence, so the keys each attention
kernel is given follow the execution in rlt.py, call by call (truncate_bptt = K splits a forward into calls of
K tokens) and chunk by chunk (feedback_interval B):
  encoder self-attention   a call of n tokens after s is given the s + n keys written so far;
  memory cross-attention   every chunk of a call is given the memory span: the written length rounded up to
                           RLT.MEMORY_BUCKET, at most the sequence (RLT.memory_span);
  window attention         a chunk of n positions is given the W - 1 window slots plus its own n;
  merge                    the gate's encoder half once per token; [W_g,r; W_s] r once per chunk and row.
"""

from __future__ import annotations

from .ledger import Ledger, add_parts, attention_flops, block_flops, item_bytes, linear_flops


def baseline_ledger(model, context: int, depth: int | None = None) -> Ledger:
    """Per-token FLOPs by layer (RLT encoder blocks: SwiGLU MLP) and the KV caches."""
    c = model.config
    model.resolve_rounds(depth)
    layers = [block_flops(c.dim, c.ffn_dim, context, mlp="swiglu") for _ in range(c.layers)]
    return Ledger(model.arch_name, context, None, {"head": linear_flops(c.dim, c.vocab_size)}, layers,
                  round_name="layer", state_per_token={"kv cache": c.layers * 2 * c.dim * item_bytes(model)})


def rlt_ledger(model, context: int, depth: int | None = None) -> Ledger:
    """Per-token FLOPs of a forward of `context` tokens by part, and by decoder layer; the decoding state."""
    c = model.config
    model.resolve_rounds(depth)
    d, L = c.dim, context
    totals: dict[str, float] = {}  # FLOPs of the whole forward of one sequence
    encoder_keys = memory_keys = window_keys = chunks = 0
    span = c.truncate_bptt or L
    for start in range(0, L, span):
        n = min(span, L - start)
        encoder_keys += n * (start + n)
        memory_span = min(L, -(-(start + n) // model.MEMORY_BUCKET) * model.MEMORY_BUCKET)
        for a, z in model.chunks(start, n):
            chunks += 1
            memory_keys += (z - a) * memory_span
            window_keys += (z - a) * (c.window - 1 + z - a)
    encoder = block_flops(d, c.ffn_dim, 0, mlp="swiglu")
    add_parts(totals, {f"encoder {name}": c.encoder_layers * flops * L for name, flops in encoder.items()})
    totals["encoder attention scores+values"] = c.encoder_layers * attention_flops(encoder_keys, d)
    if c.decoder_layers:
        totals["memory k, v"] = c.memory_groups * linear_flops(d, 2 * d) * L
    if model.merge is not None:
        totals["feedback merge"] = linear_flops(d, d) * L + linear_flops(d, 2 * d) * chunks
    layer = {"decoder window projections": linear_flops(d, 3 * d) * L + linear_flops(d, d) * L,
             "decoder window scores+values": attention_flops(window_keys, d),
             "decoder cross projections": 2 * linear_flops(d, d) * L,
             "decoder cross scores+values": attention_flops(memory_keys, d),
             "decoder mlp": 3 * linear_flops(d, c.ffn_dim) * L}
    layers = [{name: flops / L for name, flops in layer.items()} for _ in range(c.decoder_layers)]
    totals["head"] = linear_flops(d, c.vocab_size) * L
    size = item_bytes(model)
    per_token = {"encoder kv cache": c.encoder_layers * 2 * d * size}
    fixed = {"decoder windows": c.decoder_layers * 2 * (c.window - 1) * d * size}
    if c.decoder_layers:
        per_token["memory kv"] = c.memory_groups * 2 * d * size
    if model.merge is not None and L >= c.feedback_interval:  # h exists once a chunk is complete
        fixed["feedback register"] = d * size
    notes = []
    if c.decoder_layers and max(z - a for a, z in model.chunks(0, L)) > 1:
        notes.append("a chunk of n positions gives the masked window kernel W-1+n keys per query (W visible): "
                     "counted as computed")
    return Ledger(model.arch_name, context, None, {name: flops / L for name, flops in totals.items()}, layers,
                  round_name="decoder layer", state_per_token=per_token, state_fixed=fixed, notes=notes)
