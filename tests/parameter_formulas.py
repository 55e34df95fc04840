"""Parameter counts of every LM architecture, written from the equations rather than read off the modules.

`model.parameter_counts()` sums `numel` over the modules it built, so comparing it with another `numel` sum
checks only the bookkeeping. These formulas restate each component from its definition (an n x m weight,
its bias, a norm's gain and offset), so a layer built with the wrong width, a missing or extra bias, or a
component that loses a sub-layer shows up as a mismatch in that component.

`expected_counts(arch, config)` returns {component: count} for the names `parameter_counts()` uses. A new
built-in architecture adds its formula to FORMULAS. A plugin has none here: `inherited_counts` then holds the
components it inherits to their formulas, and its own are its author's to count.
"""

from __future__ import annotations

from looped.models.loop import LoopedLM


# --- pieces -------------------------------------------------------------------------------------------------
def linear(fan_in: int, fan_out: int, bias: bool) -> int:
    """y = W x (+ b): W (fan_out, fan_in)."""
    return fan_in * fan_out + (fan_out if bias else 0)


def layer_norm(d: int) -> int:
    return 2 * d  # gain and offset


def rms_norm(d: int) -> int:
    return d  # gain only


def self_attention(d: int, heads: int, bias: bool, qk_norm: bool = False) -> int:
    """W_Q, W_K, W_V, W_O (each d x d), optionally an RMSNorm gain on each query and key head."""
    head_dim = d // heads
    return 4 * linear(d, d, bias) + (2 * rms_norm(head_dim) if qk_norm else 0)


def gelu_mlp(d: int, hidden: int, bias: bool = True) -> int:
    return linear(d, hidden, bias) + linear(hidden, d, bias)


def swiglu(d: int, hidden: int) -> int:
    """W_2 (SiLU(W_1 x) * W_3 x): three bias-free matrices."""
    return 3 * d * hidden


def tied_or_head(c) -> int:
    """A separate output matrix (vocab x d), or none when the head reads the embedding."""
    return 0 if c.tie_embeddings else c.vocab_size * c.dim


# --- per family -----------------------------------------------------------------------------------------------
def pre_norm_block(c) -> int:
    """seed 000 eqs. 11-12: LayerNorm before attention and before the GELU MLP, every projection biased."""
    return 2 * layer_norm(c.dim) + self_attention(c.dim, c.heads, bias=True) + gelu_mlp(c.dim, c.ffn_dim)


def learned_positions_lm(c, middle: dict[str, int]) -> dict[str, int]:
    """Token and position tables, the rows' own middle, LayerNorm and an untied head (seed 000)."""
    return ({"embed": c.vocab_size * c.dim, "positions": c.context_length * c.dim} | middle
            | {"final_norm": layer_norm(c.dim), "head": c.vocab_size * c.dim})


def transformer(c) -> dict[str, int]:
    return learned_positions_lm(c, {"blocks": c.layers * pre_norm_block(c)})


def looped_row(c, **extras: int) -> dict[str, int]:
    """One block shared by every round: its parameters once, whatever `rounds` is; plus the row's extras."""
    return learned_positions_lm(c, {"block": pre_norm_block(c)} | extras)


def anchor(c) -> int:
    """eq. 2: LN_a(h + A2 GELU(A1 [e; h] + a1) + a2), A1 (d x 2d), A2 (d x d)."""
    return linear(2 * c.dim, c.dim, True) + linear(c.dim, c.dim, True) + layer_norm(c.dim)


def workspace(c) -> int:
    """Appendix B: LN_w, [W_g; W_v] (S + S m rows), LN_q, W_q (m), keys (S x m), W_o (m -> d), gamma, R
    retention logits, LN_b."""
    S, m, d = c.slots, c.slot_dim, c.dim
    return (layer_norm(d) + linear(d, S + S * m, True) + layer_norm(d) + linear(d, m, True) + S * m
            + linear(m, d, True) + 1 + c.rounds + layer_norm(d))


def shared_loop(c) -> dict[str, int]:
    return looped_row(c)


def adaptive_exit(c) -> dict[str, int]:
    return looped_row(c, router=linear(c.dim, c.rounds, True))  # W_exit, b_exit


def anchored_loop(c) -> dict[str, int]:
    return looped_row(c, anchor=anchor(c))


def conditioned_dense(c) -> dict[str, int]:
    # eq. 14: sigma_r, tau_r (R x d each) after the head; beta_r for r = 0 .. R-2
    return anchored_loop(c) | {"scale": c.rounds * c.dim, "shift": c.rounds * c.dim, "exit_mix": c.rounds - 1}


def workspace_loop(c) -> dict[str, int]:
    return looped_row(c, anchor=anchor(c), workspace=workspace(c))


def exit_gate_loop(c) -> dict[str, int]:
    """Ouro: RMSNorm before and after attention and the SwiGLU, no biases; the exit gate is d -> 1 with a bias."""
    layer = 4 * rms_norm(c.dim) + self_attention(c.dim, c.heads, bias=False) + swiglu(c.dim, c.ffn_dim)
    return {"embed": c.vocab_size * c.dim, "layers": c.layers * layer, "final_norm": rms_norm(c.dim),
            "head": c.vocab_size * c.dim, "gate": linear(c.dim, 1, True)}


def lstm(c) -> dict[str, int]:
    """Four gates, each from x_t and h_{t-1} (d -> d twice, both biased as PyTorch's LSTM is)."""
    gates = 4 * (linear(c.dim, c.dim, True) + linear(c.dim, c.dim, True))
    return {"embedding": c.vocab_size * c.dim, "lstm": gates, "readout": rms_norm(c.dim) + tied_or_head(c)}


def mixture_of_recursions(c) -> dict[str, int]:
    """Llama layers (RMSNorm, grouped-query attention with kv_heads key/value heads, SwiGLU, no biases); the
    router is d -> N_r without a bias; the head is tied to the embedding."""
    kv_width = c.kv_heads * (c.dim // c.heads)
    layer = (2 * rms_norm(c.dim) + linear(c.dim, c.dim, False) + linear(c.dim, 2 * kv_width, False)
             + linear(c.dim, c.dim, False) + swiglu(c.dim, c.ffn_dim))
    return {"embed": c.vocab_size * c.dim, "first": layer, "router": linear(c.dim, c.recursions, False),
            "block": c.shared_layers * layer, "last": layer, "final_norm": rms_norm(c.dim)}


def prelude_coda(c) -> dict[str, int]:
    """Sandwich blocks (four RMSNorms, bias-free attention and SwiGLU); the adapter maps [s; e] (2d) to d."""
    block = 4 * rms_norm(c.dim) + self_attention(c.dim, c.heads, bias=False) + swiglu(c.dim, c.ffn_dim)
    counts = {"embed": c.vocab_size * c.dim, "prelude": c.prelude_layers * block,
              "adapter": linear(2 * c.dim, c.dim, False), "core": c.core_layers * block,
              "coda": c.coda_layers * block, "final_norm": rms_norm(c.dim)}
    return counts | ({} if c.tie_embeddings else {"head": c.vocab_size * c.dim})


def stable_loop(c) -> dict[str, int]:
    """Blocks with QK-norm and a squared-ReLU MLP, no biases; a layer with a value table also has a gate from the
    first min(32, d) channels to one logit per head. The injection holds log A, delta (d each) and B (d x d)."""
    value_layers = set(c.value_layers())

    def block(i: int) -> int:
        gate = linear(min(32, c.dim), c.heads, False) if i in value_layers else 0
        return (2 * rms_norm(c.dim) + self_attention(c.dim, c.heads, bias=False, qk_norm=True)
                + gelu_mlp(c.dim, c.ffn_dim, bias=False) + gate)

    core_start, coda_start = c.prelude_layers, c.prelude_layers + c.core_layers
    counts = {"embed": c.vocab_size * c.dim, "value_embeds": len(value_layers) * c.vocab_size * c.dim,
              "prelude": sum(block(i) for i in range(core_start)), "prelude_norm": rms_norm(c.dim),
              "injection": 2 * c.dim + linear(c.dim, c.dim, False),
              "core": sum(block(i) for i in range(core_start, coda_start)), "readout_proj": linear(c.dim, c.dim, False),
              "coda": sum(block(i) for i in range(coda_start, coda_start + c.coda_layers)),
              "final_norm": rms_norm(c.dim)}
    return counts | ({} if c.tie_embeddings else {"head": c.vocab_size * c.dim})


def rlt_block(c) -> int:
    """Encoder (and baseline) block: pre-RMSNorm, bias-free attention with QK-norm, SwiGLU."""
    return 2 * rms_norm(c.dim) + self_attention(c.dim, c.heads, bias=False, qk_norm=True) + swiglu(c.dim, c.ffn_dim)


def rlt(c) -> dict[str, int]:
    """RLT (eqs. 2, 9-18): memory groups W_K, W_V with a key norm behind one shared RMSNorm_E; the merge gate
    W_g ([e; r] -> d, biased), W_s, RMSNorm_s and the initial state s*; decoder layers of window attention
    (QK-norm), memory cross-attention (query norm) and SwiGLU, three RMSNorms. With tie_encoder_decoder the
    decoder's window projections and FFN are the encoder block's (counted there)."""
    d, head_dim = c.dim, c.dim // c.heads
    memory = rms_norm(d) + c.memory_groups * (linear(d, 2 * d, False) + rms_norm(head_dim)) if c.decoder_layers else 0
    merge = rms_norm(d) + linear(2 * d, d, True) + linear(d, d, False) + d if c.feedback else 0
    shared = self_attention(d, c.heads, bias=False) + swiglu(d, c.ffn_dim)  # window q/k/v/out and the FFN
    own = 3 * rms_norm(d) + 3 * rms_norm(head_dim) + 2 * linear(d, d, False)  # norms, cross query and out
    decoder = c.decoder_layers * (own + (0 if c.tie_encoder_decoder else shared))
    return {"embedding": c.vocab_size * d, "encoder": c.encoder_layers * rlt_block(c), "memory": memory,
            "merge": merge, "decoder": decoder, "readout": rms_norm(d) + tied_or_head(c)}


def rlt_baseline(c) -> dict[str, int]:
    return {"embed": c.vocab_size * c.dim, "blocks": c.layers * rlt_block(c), "out_norm": rms_norm(c.dim)} | (
        {} if c.tie_embeddings else {"head": c.vocab_size * c.dim})


# Settings beside the tiny config that change which parameters exist: each must change the count as the
# formula says (an untied head appears, a table or a merge disappears, groups multiply).
VARIANTS = {"lstm": [dict(tie_embeddings=False)], "prelude_coda": [dict(tie_embeddings=False)],
            "stable_loop": [dict(tie_embeddings=False), dict(value_embeddings=False)],
            "rlt": [dict(tie_embeddings=False, memory_groups=2),
                    dict(tie_encoder_decoder=True, encoder_layers=2, decoder_layers=2), dict(feedback=False)],
            "rlt_baseline": [dict(tie_embeddings=False)], "mixture_of_recursions": [dict(kv_heads=4)]}

FORMULAS = {"transformer": transformer, "shared_loop": shared_loop, "adaptive_exit": adaptive_exit,
            "anchored_loop": anchored_loop, "conditioned_dense": conditioned_dense, "workspace": workspace_loop,
            "workspace_retention": workspace_loop, "exit_gate_loop": exit_gate_loop, "lstm": lstm,
            "mixture_of_recursions": mixture_of_recursions, "prelude_coda": prelude_coda, "stable_loop": stable_loop,
            "rlt": rlt, "rlt0": rlt, "rlt_baseline": rlt_baseline}


def expected_counts(arch: str, config) -> dict[str, int]:
    """{component: parameters} by formula, plus 'total'."""
    counts = FORMULAS[arch](config)
    return counts | {"total": sum(counts.values())}


def inherited_counts(model) -> dict[str, int]:
    """An architecture without a formula (a plugin): the components it inherits. A seed-000 loop row (LoopedLM)
    inherits the tables, the shared block, the final norm and the head; any other model at least its token
    table and head, where it names them as the built-in rows do."""
    c = model.config
    if isinstance(model, LoopedLM):
        return looped_row(c)
    own = model.parameter_counts()
    return {name: c.vocab_size * c.dim for name in ("embed", "embedding", "head") if name in own}
