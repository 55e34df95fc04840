"""Compute ledgers of the reasoning rows of seed 002 (looped/models/ledger.py); the classes bind them as `ledger`.

A reasoning model reads a whole problem of `context` positions at once (no incremental decoding, so no
decoding state) and reads one answer out per problem: the readout's FLOPs are spread over the positions
("readout", per problem / context). Attention is bidirectional and masked (adjacency or padding), so every
position is given all `context` keys. `depth` is the step budget T (default: the top of the trained range);
for ut_act it is the halting budget, and the ledger counts every step of it: ACT stops early once every
position has halted, so the count is the most one forward can do.
"""

from __future__ import annotations

from .ledger import Ledger, attention_flops, block_flops, linear_flops


def front_and_readout(config, context: int) -> dict[str, float]:
    """Per-token FLOPs of the perception (graph: the role vectors placed by a one-hot matmul) and the readout."""
    d = config.dim
    graph = config.input_kind == "graph"
    width = 2 * d if graph else d
    parts = {"perception roles": linear_flops(2, d)} if graph else {}
    parts["readout"] = (linear_flops(width, d) + linear_flops(d, 1)) / context
    return parts


def encoder_block(config, context: int) -> dict[str, float]:
    return block_flops(config.dim, config.ffn_dim, context)


def recurrent_core_ledger(model, context: int, depth: int | None = None) -> Ledger:
    """drt / drt_tied: the shared block T times, plus the gate [H~; H] -> d each step when the core has one."""
    c = model.config
    steps = model.check_steps(c.trained_steps()[1] if depth is None else depth)
    step = encoder_block(c, context)
    if c.gate:
        step["gate"] = linear_flops(2 * c.dim, c.dim)
    return Ledger(model.arch_name, context, steps, front_and_readout(c, context), [dict(step) for _ in range(steps)],
                  round_name="step", decodes=False)


def act_ledger(model, context: int, depth: int | None = None) -> Ledger:
    """ut_act at the full halting budget: the shared block and the halting unit (d -> 1) every step."""
    c = model.config
    steps = c.max_steps if depth is None else int(depth)
    if not 1 <= steps <= c.max_steps:
        raise ValueError(f"depth (halting budget) must be in [1, model.max_steps={c.max_steps}], got {steps}")
    step = {**encoder_block(c, context), "halting unit": linear_flops(c.dim, 1)}
    return Ledger(model.arch_name, context, steps, front_and_readout(c, context), [dict(step) for _ in range(steps)],
                  round_name="step", decodes=False,
                  notes=["ACT stops once every position halted: this is the budget's maximum"])


def refuse_depth(model, depth: int | None) -> None:
    if depth is not None:
        raise ValueError(f"{model.arch_name} has a fixed depth; a step budget does not apply")


def fixed_transformer_ledger(model, context: int, depth: int | None = None) -> Ledger:
    refuse_depth(model, depth)
    c = model.config
    return Ledger(model.arch_name, context, None, front_and_readout(c, context),
                  [encoder_block(c, context) for _ in range(c.layers)], round_name="layer", decodes=False)


def gnn_ledger(model, context: int, depth: int | None = None) -> Ledger:
    """Per layer: the in-neighbour mean as a (L x L) @ (L x d) product, and the two-matrix update on [x; mean]."""
    refuse_depth(model, depth)
    c = model.config
    layer = {"message mean": linear_flops(context, c.dim),
             "mlp": linear_flops(2 * c.dim, c.ffn_dim) + linear_flops(c.ffn_dim, c.dim)}
    return Ledger(model.arch_name, context, None, front_and_readout(c, context),
                  [dict(layer) for _ in range(c.layers)], round_name="layer", decodes=False)


def trm_ledger(model, context: int, depth: int | None = None) -> Ledger:
    """trm: per supervision step, T (n + 1) applications of the tiny network, then the readout and the halting
    head. Every recursion counts, the no-gradient ones included; the MLP mixer runs at `max_length` positions
    whatever the input's length, so its per-token figures are scaled by max_length / context."""
    c = model.config
    steps = model.check_steps(depth)
    positions = c.max_length if c.mixer == "mlp" else context
    if c.mixer == "attention":
        mix = {"attention projections": linear_flops(c.dim, 3 * c.dim) + linear_flops(c.dim, c.dim),
               "attention scores+values": attention_flops(context, c.dim)}
    else:  # a SwiGLU over the positions for each channel: 3 matrices of max_length x mixer width per channel
        mix = {"token mixer": 3 * linear_flops(c.max_length, c.mixer_width()) * c.dim / c.max_length}
    block = {**mix, "mlp": 3 * linear_flops(c.dim, c.ffn_dim)}
    applications = c.recursions * (c.latent_steps + 1) * c.layers
    step = {name: flops * applications * positions / context for name, flops in block.items()}
    outside = front_and_readout(c, context)
    width = 2 * c.dim if c.input_kind == "graph" else c.dim
    step["readout"] = outside.pop("readout")  # read out after every supervision step
    step["halting head"] = linear_flops(width, 1) / context
    notes = ["the no-gradient recursions are counted; a backward pass covers only the last of the T per step"]
    if c.test_halting:
        notes.append("halting stops rows early: this is the budget's maximum")
    return Ledger(model.arch_name, context, steps, outside, [dict(step) for _ in range(steps)],
                  round_name="supervision step", decodes=False, notes=notes)
