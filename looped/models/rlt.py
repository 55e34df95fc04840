"""Recurrent Looped Transformer (seed 003): a parallel causal encoder and a recurrent decoder.

Rows (registry names):
  rlt           RLT-1 (feedback_interval B = 1): every token merges the previous token's final decoder
                state; RLT-2 for B > 1: the feedback register h changes only at chunk boundaries
  rlt0          RLT-0 (B = infinity): no merge, no s*, the decoder runs fully in parallel
  rlt_baseline  the decoder-only Transformer the paper compares against (§3.1)

One token update (paper eqs. 1-6, 9-16; positions count from 0 here, BOS is position 0):
  e_t   = Encoder(x_{<=t})                        L_E causal pre-RMSNorm blocks, parallel over positions
  k_t^g = RoPE(knorm(W_K^g RMSNorm_E(e_t)), t)     encoder memory, G groups shared by the decoder layers
  v_t^g = W_V^g RMSNorm_E(e_t)
  r     = RMSNorm_s(h)                            h = s_{t-1} (RLT-1) or the last chunk boundary state (RLT-2)
  u_t   = e_t + alpha * sigmoid(W_g [e_t; r] + b_g) * (W_s r)
  z^0 = u_t;  per decoder layer:  z += SWA(RMSNorm(z)) over positions t-W+1..t of this layer's inputs
                                  z += CrossAttn(RMSNorm(z)) over memory positions <= t
                                  z += SwiGLU(RMSNorm(z))
  s_t = z^{L_D};  logits_t = W_o RMSNorm_o(s_t)   (W_o tied to the embedding by default)

RLT-2 (Appendix I): chunks of B positions anchored at BOS ([0, B), [B, 2B), ...). Every position of a
chunk merges the same h, so a chunk's decoder runs in parallel; after a *complete* chunk h = s of its
last position. A prompt that ends inside a chunk leaves h at the previous boundary (I.3), so any split
of the input into decode calls gives the same logits. B = 1 is exactly RLT-1.

Execution. `forward` = `decode` from a fresh state, so training, prefill and incremental decoding are
one code path. Work that does not depend on the feedback (encoder, memory K/V, the encoder half of the
gate, RoPE tables) is done for all new positions before the sequential loop; the loop only runs the
merge and the decoder layers, once per chunk (B > 1), per token (B = 1) or once (RLT-0).
Where RLT-1 time goes (d 64, 2+2, W 8, batch 64, length 40, forward+backward, one thread): about
2.1-3.3x RLT-0 (RLT-2 with B = 4: 1.2-1.5x; the paper measured 4.2-4.3x and 1.8-1.9x). The loop issues
~500 kernels per token (~100 forward, ~400 backward; each RMSNorm backward alone is ~10) on (64, 64)-sized
tensors, so the time is per-kernel cost, not flops: matmuls ~18%, single-query attention kernels ~18%
(their cost is per batch x head pair), elementwise kernels ~40%, dispatch and autograd bookkeeping ~25%.
Hence: split instead of slice (one backward cat instead of a zero-filled gradient per chunk), memory read
through views, q and k normalised and rotated together, three-kernel RoPE, one matmul for both state terms,
and a static-shape chunk step (`decoder_step`) that train.compile fuses: each decoder layer's window is a
fixed buffer of W-1 slots (zeros before position 0, hidden by a mask; keys are RoPE-rotated at their absolute
positions, so a slot's place in the buffer does not matter, only the mask), and every chunk of a call reads
the memory at one span with a causal mask, so all positions of a training step have the same shapes.

Choices the paper leaves open (inferred, not stated by it):
  s*      initial feedback state, init N(0, 1): the merge reads it only through RMSNorm_s, so its scale
          only sets the gradient through that norm; unit RMS keeps that gradient O(1).
  init    width-muP-style stds: embedding 0.02, every matrix 0.5/sqrt(fan_in), biases 0, gains 1.
  QK-norm RMSNorm over head_dim with a learned gain shared by the heads (also the memory keys and the
          cross-attention queries). With these gains the paper's RLT-0 4+4 count, 27,938,944, is exact.
  RoPE    half-split convention, base `rope_base`, on encoder/SWA queries and keys, memory keys and
          cross-attention queries, all at absolute positions.
  groups  decoder layer l reads memory group l * G // L_D; RMSNorm_E is shared by the groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..nn import KVCache, MultiHeadAttention, RMSNorm, RotaryEmbedding, SwiGLU, position_mask
from .base import CausalLM, DecodeState, LMConfig
from .registry import register
from .rlt_ledger import baseline_ledger, rlt_ledger


@dataclass
class RLTConfig(LMConfig):
    arch: str = "rlt"
    vocab_size: int = 277  # 256 bytes + 21 specials
    dim: int = 512
    heads: int = 4
    ffn_dim: int = 1365
    encoder_layers: int = 4  # L_E >= 1
    decoder_layers: int = 4  # L_D >= 0; 8+0 keeps the merge
    window: int = 8  # decoder SWA window W, includes the current token (caches keep W-1)
    feedback: bool = True  # False = RLT-0: no merge, no s*
    feedback_interval: int = 1  # B: 1 = RLT-1, > 1 = RLT-2 (chunks anchored at BOS)
    merge_scale: float = 0.1  # alpha
    memory_groups: int = 1  # G
    tie_encoder_decoder: bool = False  # Appendix A.1: SWA shares the encoder layer's attention and FFN weights
    tie_embeddings: bool = True
    norm_eps: float = 1e-6
    rope_base: float = 10000.0
    truncate_bptt: int | None = None  # training: cut gradients every K tokens (Appendix H); None = full BPTT
    checkpoint_activations: bool = False  # training: recompute decoder activations in backward

    def validate(self) -> None:
        super().validate()
        for name in ("dim", "heads", "ffn_dim", "encoder_layers", "window", "feedback_interval", "memory_groups"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.decoder_layers < 0:
            raise ValueError(f"model.decoder_layers must be >= 0, got {self.decoder_layers}")
        if self.dim % self.heads or (self.dim // self.heads) % 2:
            raise ValueError(f"model.dim: width {self.dim} must split into {self.heads} heads of even size (RoPE)")
        if self.decoder_layers and self.memory_groups > self.decoder_layers:
            raise ValueError(f"model.memory_groups: {self.memory_groups} groups for only "
                             f"{self.decoder_layers} decoder layers")
        if self.tie_encoder_decoder and self.encoder_layers != self.decoder_layers:
            raise ValueError("model.tie_encoder_decoder needs encoder_layers == decoder_layers, "
                             f"got {self.encoder_layers} and {self.decoder_layers}")
        if self.truncate_bptt is not None and self.truncate_bptt < 1:
            raise ValueError(f"model.truncate_bptt must be >= 1 or null, got {self.truncate_bptt}")
        if self.arch == "rlt0" and self.feedback:
            raise ValueError("model.feedback: rlt0 is the no-feedback control; use arch rlt for feedback")


@dataclass
class RLT0Config(RLTConfig):
    arch: str = "rlt0"
    feedback: bool = False


@dataclass
class RLTState(DecodeState):
    encoder: list[KVCache] = field(default_factory=list)  # per encoder layer: causal self-attention K/V
    memory: list[KVCache] = field(default_factory=list)  # per memory group: k, v of every consumed position
    windows: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # per decoder layer: SWA
    #   keys, values of the last W-1 positions, each (batch, heads, W-1, head_dim); slots before position 0
    #   are zeros, masked by position
    feedback: torch.Tensor | None = None  # (batch, dim) register h; None = s* (no complete chunk yet)
    shuffle_feedback: bool = False  # ablation: row i merges the register of row i-1 (the batch rolled by one)


# --- pieces ---------------------------------------------------------------------------------------------
def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Half-split RoPE (the convention of looped.nn.RotaryEmbedding) from (n, head_dim) tables:
    [x1; x2] -> [x1 cos - x2 sin; x2 cos + x1 sin] = x * cos + roll(x) * [-sin; sin]. Three kernels, because
    the token-sequential decoder pays per kernel, not per flop."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), signed_sin)


class Block(nn.Module):
    """Pre-RMSNorm causal block (encoder and baseline): x + Attn(N(x)), then + SwiGLU(N(x)); no biases."""

    def __init__(self, c: RLTConfig):
        super().__init__()
        self.attn_norm = RMSNorm(c.dim, c.norm_eps)
        self.attn = MultiHeadAttention(c.dim, c.heads, bias=False, rope=True, rope_base=c.rope_base, qk_norm=True,
                                       norm_eps=c.norm_eps)
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)
        self.ffn = SwiGLU(c.dim, c.ffn_dim)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cache=cache)
        return x + self.ffn(self.ffn_norm(x))


class MemoryGroup(nn.Module):
    """One encoder-memory group: k = knorm(W_K n), v = W_V n for n = RMSNorm_E(e) (eq. 2); RoPE is added later."""

    def __init__(self, c: RLTConfig):
        super().__init__()
        self.heads, self.head_dim = c.heads, c.dim // c.heads
        self.kv = nn.Linear(c.dim, 2 * c.dim, bias=False)  # [W_K; W_V]
        self.k_norm = RMSNorm(self.head_dim, c.norm_eps)

    def forward(self, normed: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]):
        b, n, _ = normed.shape
        k, v = self.kv(normed).view(b, n, 2, self.heads, self.head_dim).transpose(1, 3).unbind(2)  # (b, H, n, hd)
        return rotate(self.k_norm(k), *rope), v


class Merge(nn.Module):
    """u = e + alpha * sigmoid(W_g [e; r] + b_g) * (W_s r), r = RMSNorm_s(h)  (eqs. 9-11, 17-18)."""

    def __init__(self, c: RLTConfig):
        super().__init__()
        self.dim, self.scale = c.dim, c.merge_scale
        self.state_norm = RMSNorm(c.dim, c.norm_eps)  # RMSNorm_s
        self.gate = nn.Linear(2 * c.dim, c.dim)  # W_g, b_g
        self.state_proj = nn.Linear(c.dim, c.dim, bias=False)  # W_s
        self.initial_state = nn.Parameter(torch.randn(c.dim))  # s*, see the module docstring

    def encoder_gate(self, e: torch.Tensor) -> torch.Tensor:
        """W_g[:, :d] e + b_g for all positions at once: the half of the gate that ignores the feedback."""
        return F.linear(e, self.gate.weight[:, :self.dim], self.gate.bias)

    def state_weights(self) -> torch.Tensor:
        """[W_g[:, d:]; W_s] (2d, d): both act on r, so one matmul per chunk serves the gate and the update."""
        return torch.cat((self.gate.weight[:, self.dim:], self.state_proj.weight))

    def forward(self, e: torch.Tensor, gate_e: torch.Tensor, h: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        # e, gate_e (batch, n, dim) for the n positions of one chunk; h (batch, dim) shared by the chunk
        gate_r, update = F.linear(self.state_norm(h), weights).unsqueeze(1).chunk(2, dim=-1)  # (batch, 1, dim)
        return torch.addcmul(e, torch.sigmoid(gate_e + gate_r), update, value=self.scale)


class WindowAttention(nn.Module):
    """Causal sliding-window self-attention over a decoder layer's own inputs (eqs. 12-14)."""

    def __init__(self, c: RLTConfig):
        super().__init__()
        self.heads, self.head_dim, self.keep = c.heads, c.dim // c.heads, c.window - 1
        self.qkv = nn.Linear(c.dim, 3 * c.dim, bias=False)
        self.q_norm = RMSNorm(self.head_dim, c.norm_eps)
        self.k_norm = RMSNorm(self.head_dim, c.norm_eps)
        self.out = nn.Linear(c.dim, c.dim, bias=False)

    def forward(self, x, rope, past, mask):
        # x (batch, n, dim); past: keys, values (batch, H, W-1, hd) of positions start-W+1 .. start-1 (slots
        # before position 0 are zeros, hidden by `mask` (n, W-1+n)). The returned window has the same fixed
        # shape: the last W-1 of past + new, so a compiled step sees one shape at every position.
        b, n, d = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, b, H, n, hd)
        # q and k normalised and rotated together: same arithmetic as q_norm/k_norm, half the kernels
        gains = torch.stack((self.q_norm.weight, self.k_norm.weight))[:, None, None, None]  # (2, 1, 1, 1, hd)
        q, k = rotate(F.rms_norm(qkv[:2], (self.head_dim,), eps=self.q_norm.eps) * gains, *rope).unbind(0)
        k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], qkv[2]), dim=2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, n, d)), (k[:, :, n:], v[:, :, n:])


class MemoryAttention(nn.Module):
    """Cross-attention from decoder position t to encoder memory positions <= t (eq. 15)."""

    def __init__(self, c: RLTConfig):
        super().__init__()
        self.heads, self.head_dim = c.heads, c.dim // c.heads
        self.query = nn.Linear(c.dim, c.dim, bias=False)
        self.q_norm = RMSNorm(self.head_dim, c.norm_eps)
        self.out = nn.Linear(c.dim, c.dim, bias=False)

    def forward(self, x, rope, memory, mask):
        # memory: keys, values (batch, H, L, hd); mask (n, L) hides positions after each query and unwritten slots
        b, n, d = x.shape
        q = rotate(self.q_norm(self.query(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)), *rope)
        y = F.scaled_dot_product_attention(q, memory[0], memory[1], attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class DecoderLayer(nn.Module):
    """SWA -> memory cross-attention -> SwiGLU, each pre-RMSNorm with a residual (eqs. 12-16)."""

    def __init__(self, c: RLTConfig):
        super().__init__()
        self.swa_norm = RMSNorm(c.dim, c.norm_eps)
        self.swa = WindowAttention(c)
        self.cross_norm = RMSNorm(c.dim, c.norm_eps)
        self.cross = MemoryAttention(c)
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)
        self.ffn = SwiGLU(c.dim, c.ffn_dim)

    def forward(self, x, rope, past, memory, swa_mask, cross_mask):
        """x (batch, n, dim) -> x and this layer's new window K/V."""
        y, window = self.swa(self.swa_norm(x), rope, past, swa_mask)
        x = x + y
        x = x + self.cross(self.cross_norm(x), rope, memory, cross_mask)
        return x + self.ffn(self.ffn_norm(x)), window


def init_weights(model: nn.Module) -> None:
    """Embeddings N(0, 0.02^2), matrices N(0, (0.5/sqrt(fan_in))^2), biases 0 (inferred: width-muP; the paper
    does not state it)."""
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.5 / math.sqrt(module.in_features))
            if module.bias is not None:
                nn.init.zeros_(module.bias)


# --- the model ------------------------------------------------------------------------------------------
@register("rlt", RLTConfig, test_overrides=dict(dim=32, heads=2, ffn_dim=48, encoder_layers=1, decoder_layers=2,
                                                window=3, context_length=32))
class RLT(CausalLM):
    # train.compile: the per-chunk decoder step (merge + decoder layers), whose shapes are the same at every
    # position of a call (fixed window buffers, one memory span; see run_decoder). When the windows grew
    # over the first positions, inductor (torch 2.13) failed on the backward ("Exponent must be
    # non-negative"); with fixed windows only the memory span and the chunk size vary between calls, and
    # they become dynamic after the first change.
    compiled_methods = ("decoder_step",)
    ledger = rlt_ledger  # FLOPs and state bytes (looped/models/rlt_ledger.py)

    def __init__(self, config: RLTConfig):
        super().__init__()
        config.validate()
        self.config = c = config
        self.head_dim = c.dim // c.heads
        self.embed = nn.Embedding(c.vocab_size, c.dim)
        self.encoder = nn.ModuleList(Block(c) for _ in range(c.encoder_layers))
        if c.decoder_layers:  # with no decoder layer nothing reads the memory (8+0 has no memory parameters)
            self.memory_norm = RMSNorm(c.dim, c.norm_eps)  # RMSNorm_E, shared by the groups
            self.memory = nn.ModuleList(MemoryGroup(c) for _ in range(c.memory_groups))
        self.merge = Merge(c) if c.feedback else None
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        self.memory_group = [i * c.memory_groups // c.decoder_layers for i in range(c.decoder_layers)]  # g(l)
        self.out_norm = RMSNorm(c.dim, c.norm_eps)  # RMSNorm_o
        self.head = None if c.tie_embeddings else nn.Linear(c.dim, c.vocab_size, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim, c.rope_base)  # frequencies for the decoder-side tables
        init_weights(self)
        if c.tie_encoder_decoder:  # Appendix A.1: same projections and FFN, separate norms (QK-norm included)
            for block, layer in zip(self.encoder, self.decoder):
                layer.swa.qkv, layer.swa.out, layer.ffn = block.attn.qkv, block.attn.out, block.ffn

    def parameter_components(self) -> dict[str, list[str]]:
        # shared (tied) parameters are named, and counted, under their first owner: embed / encoder
        return {"embedding": ["embed"], "encoder": ["encoder"], "memory": ["memory_norm", "memory"],
                "merge": ["merge"], "decoder": ["decoder"], "readout": ["out_norm", "head"]}

    # --- protocol ---------------------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None,
                shuffle_feedback: bool = False) -> torch.Tensor:
        """Teacher-forced logits (batch, length, vocab); gradients follow the whole recurrence unless
        truncate_bptt = K, which detaches every state tensor at multiples of K (Appendix H, eq. 33).

        shuffle_feedback: the shuffled-feedback ablation. Every merge reads another row's register h (the
        batch rolled by one), so a model that really carries its answer in h falls to chance, while one that
        solves short rows by attention over the memory does not notice."""
        self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        length = tokens.shape[1]
        state = self.new_state(tokens.shape[0], capacity=length)
        state.shuffle_feedback = shuffle_feedback
        span = self.config.truncate_bptt or max(length, 1)
        logits = []
        for start in range(0, length, span):
            if start:
                self.detach_state(state)
            logits.append(self.consume(tokens[:, start:start + span], state))
        return torch.cat(logits, dim=1) if logits else self.consume(tokens, state)

    def init_state(self, batch: int, *, rounds: int | None = None) -> RLTState:
        self.resolve_rounds(rounds)
        return self.new_state(batch, capacity=self.config.context_length)

    def decode(self, tokens: torch.Tensor, state: RLTState) -> torch.Tensor:
        """Consume (batch, n) tokens after state.position; any split of a sequence gives the same logits."""
        self.check_tokens(tokens, start=state.position)
        return self.consume(tokens, state)

    # --- one call: encoder, memory, merge + decoder, readout ---------------------------------------------
    def consume(self, tokens: torch.Tensor, state: RLTState) -> torch.Tensor:
        if not tokens.shape[1]:
            return self.embed.weight.new_zeros(tokens.shape[0], 0, self.config.vocab_size)
        x = self.embed(tokens)
        for block, cache in zip(self.encoder, state.encoder):
            x = block(x, cache)
        rope = self.rope_tables(state.position, tokens.shape[1], x)
        memory = self.write_memory(x, rope, state)
        y = self.run_decoder(x, rope, memory, state)
        state.position += tokens.shape[1]
        return self.readout(y)

    def readout(self, s: torch.Tensor) -> torch.Tensor:
        s = self.out_norm(s)
        return self.head(s) if self.head is not None else F.linear(s, self.embed.weight)

    def rope_tables(self, start: int, n: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and [-sin; sin], each (n, head_dim), for absolute positions start..start+n-1 (see `rotate`)."""
        inv_freq = self.rotary.inv_freq
        angles = torch.arange(start, start + n, device=like.device).to(inv_freq.dtype)[:, None] * inv_freq
        cos, sin = torch.cat((angles, angles), dim=-1).cos(), angles.sin()
        return cos.to(like.dtype), torch.cat((-sin, sin), dim=-1).to(like.dtype)

    def write_memory(self, e: torch.Tensor, rope, state: RLTState) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Append the new positions' memory K/V; return every group's keys, values (batch, H, L, hd), L the
        memory span of this call (`memory_span`)."""
        if not self.decoder:
            return []
        normed = self.memory_norm(e)
        for group, cache in zip(self.memory, state.memory):
            cache.append(*group(normed, rope))
        span = self.memory_span(state.memory[0])
        return [(cache.keys[:, :, :span], cache.values[:, :, :span]) for cache in state.memory]

    MEMORY_BUCKET = 64

    @classmethod
    def memory_span(cls, cache: KVCache) -> int:
        """How many memory slots the decoder reads in this call: the written length rounded up to a multiple of
        MEMORY_BUCKET, at most the capacity (the slots past the written length are zeros, masked). One span
        serves every chunk of a call, and `forward` makes capacity = its length, so a training step reads one
        memory shape at every position; incremental decoding changes shape once per MEMORY_BUCKET positions."""
        return min(cache.capacity, -(-cache.length // cls.MEMORY_BUCKET) * cls.MEMORY_BUCKET)

    def chunks(self, start: int, n: int) -> list[tuple[int, int]]:
        """Local [a, z) ranges of the n new positions, cut where a feedback chunk begins (multiples of B)."""
        if self.merge is None:
            return [(0, n)]
        every = self.config.feedback_interval
        edges = [0, *range(every - start % every, n, every), n]
        return list(zip(edges[:-1], edges[1:]))

    def run_decoder(self, e: torch.Tensor, rope, memory, state: RLTState) -> torch.Tensor:
        """Merge and decoder for the new positions, chunk after chunk; returns s (batch, n, dim).

        Every chunk runs `decoder_step`, whose inputs have the same shapes at every position of a call: the
        window K/V are fixed (W-1)-slot buffers and the memory is read at one span, both with boolean masks
        built here from positions (tensors, so no per-position Python value enters the step). That is what
        lets train.compile fuse the token-sequential decoder of RLT-1 into one compiled graph per chunk size
        instead of ~1,900 eager operator calls per position."""
        start, every = state.position, self.config.feedback_interval
        chunks = self.chunks(start, e.shape[1])
        sizes = [z - a for a, z in chunks]
        # split, not slice: one backward cat instead of a zero-filled full-length gradient per chunk
        inputs = e.split(sizes, dim=1)
        gates, weights = [None] * len(chunks), None
        if self.merge is not None:  # hoisted out of the loop: the gate's encoder half and the state weights
            gates, weights = self.merge.encoder_gate(e).split(sizes, dim=1), self.merge.state_weights()
        span = memory[0][0].shape[2] if memory else 0
        outputs = []
        for i, (a, z) in enumerate(chunks):
            h = self.feedback_register(state) if self.merge is not None else None
            masks = self.step_masks(start + a, z - a, span, e.device)
            x, state.windows = self.decoder_pass(inputs[i], gates[i], h, weights, (rope[0][a:z], rope[1][a:z]),
                                                 state.windows, memory, *masks)
            if self.merge is not None and (start + z) % every == 0:
                state.feedback = x[:, -1]  # a complete chunk: its last output becomes h
            outputs.append(x)
        # the windows are views into the last chunk's keys/values (a whole prefill for RLT-0): copy them out, so
        # the state does not keep that chunk's storage alive
        state.windows = [(k.clone(), v.clone()) for k, v in state.windows]
        return torch.cat(outputs, dim=1) if len(outputs) > 1 else outputs[0]

    def step_masks(self, start: int, n: int, span: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Boolean masks (True = may attend) for the n positions start..start+n-1: over the window keys
        (n, W-1+n), i.e. the W-1 buffer slots (positions start-W+1 .. start-1; negative ones are empty) and
        the chunk itself, and over the memory span (n, span). Each query sees at least itself: no empty row."""
        keep = self.config.window - 1
        swa = position_mask(start, n, start - keep, keep + n, causal=True, window=self.config.window, device=device)
        swa[:, :max(0, keep - start)] = False  # slots before position 0
        cross = position_mask(start, n, 0, span, causal=True, window=None, device=device)
        return swa, cross

    def feedback_register(self, state: RLTState) -> torch.Tensor:
        if state.feedback is not None:
            return state.feedback.roll(1, 0) if state.shuffle_feedback else state.feedback
        return self.merge.initial_state.expand(state.batch, -1)

    def decoder_pass(self, *step_inputs):
        """`decoder_step`, recomputed in backward under checkpoint_activations."""
        if self.config.checkpoint_activations and torch.is_grad_enabled():
            return checkpoint(self.decoder_step, *step_inputs, use_reentrant=False)
        return self.decoder_step(*step_inputs)

    def decoder_step(self, x, gate_e, h, weights, rope, windows, memory, swa_mask, cross_mask):
        """Merge + every decoder layer for one chunk of n positions (what train.compile compiles).
        x, gate_e (batch, n, dim); h (batch, dim) or None (RLT-0); windows: per layer (batch, H, W-1, hd) K/V;
        memory: per group (batch, H, span, hd) K/V. Returns s (batch, n, dim) and the new windows."""
        if self.merge is not None:
            x = self.merge(x, gate_e, h, weights)
        new_windows = []
        for layer, past, group in zip(self.decoder, windows, self.memory_group):
            x, window = layer(x, rope, past, memory[group], swa_mask, cross_mask)
            new_windows.append(window)
        return x, new_windows

    # --- state ------------------------------------------------------------------------------------------
    def new_state(self, batch: int, capacity: int) -> RLTState:
        c, w = self.config, self.embed.weight
        def cache():
            return KVCache(batch, c.heads, self.head_dim, capacity, dtype=w.dtype, device=w.device)
        empty_window = torch.zeros(batch, c.heads, c.window - 1, self.head_dim, dtype=w.dtype, device=w.device)
        memory = [cache() for _ in range(c.memory_groups if self.decoder else 0)]
        for m in memory:  # the decoder reads whole spans past the written length (masked): zeros, never garbage
            m.keys.zero_(), m.values.zero_()
        return RLTState(batch=batch, encoder=[cache() for _ in self.encoder], memory=memory,
                        windows=[(empty_window, empty_window) for _ in self.decoder])

    def full_window(self, kept: torch.Tensor) -> torch.Tensor:
        """A saved window (batch, H, kept, hd) as the fixed W-1-slot buffer: states saved before the buffers
        were fixed keep only min(W-1, position) slots; the missing leading slots are before position 0."""
        missing = self.config.window - 1 - kept.shape[2]
        return F.pad(kept, (0, 0, missing, 0)) if missing > 0 else kept

    @staticmethod
    def detach_state(state: RLTState) -> None:
        """stopgrad on every boundary tensor (eq. 33 plus the encoder side). The encoder and memory buffers
        are cloned because later positions are written into them in place, which must not touch tensors
        the earlier graph saved."""
        for cache in state.encoder + state.memory:
            cache.keys, cache.values = cache.keys.detach().clone(), cache.values.detach().clone()
        state.windows = [(k.detach(), v.detach()) for k, v in state.windows]
        if state.feedback is not None:
            state.feedback = state.feedback.detach()

    saves_state = True
    STATE_FIELDS = ("arch", "vocab_size", "dim", "heads", "ffn_dim", "encoder_layers", "decoder_layers", "window",
                    "feedback", "feedback_interval", "merge_scale", "memory_groups", "tie_encoder_decoder",
                    "rope_base", "norm_eps")

    def state_to_tensors(self, state: RLTState) -> tuple[dict[str, torch.Tensor], dict]:
        """Plain tensors (safetensors-ready) and JSON-ready metadata describing a decode state."""
        tensors = {}
        for kind, caches in (("encoder", state.encoder), ("memory", state.memory)):
            for i, cache in enumerate(caches):
                tensors[f"{kind}.{i}.keys"] = cache.keys[:, :, :cache.length].contiguous()
                tensors[f"{kind}.{i}.values"] = cache.values[:, :, :cache.length].contiguous()
        for i, (k, v) in enumerate(state.windows):
            tensors[f"window.{i}.keys"], tensors[f"window.{i}.values"] = k.contiguous(), v.contiguous()
        if state.feedback is not None:
            tensors["feedback"] = state.feedback.contiguous()
        tensors = {name: t.detach() for name, t in tensors.items()}
        meta = {name: getattr(self.config, name) for name in self.STATE_FIELDS}
        meta.update(batch=state.batch, position=state.position)  # the chunk offset is position % feedback_interval
        return tensors, meta

    def state_from_tensors(self, tensors: dict[str, torch.Tensor], meta: dict) -> RLTState:
        """Rebuild a decode state saved by state_to_tensors; refuses one saved by a different config."""
        self.check_state_fits(meta)
        state = self.init_state(int(meta["batch"]))
        state.position = int(meta["position"])
        for kind, caches in (("encoder", state.encoder), ("memory", state.memory)):
            for i, cache in enumerate(caches):
                cache.keys[:, :, :state.position] = tensors[f"{kind}.{i}.keys"]
                cache.values[:, :, :state.position] = tensors[f"{kind}.{i}.values"]
                cache.length = state.position
        w = self.embed.weight
        state.windows = [(self.full_window(tensors[f"window.{i}.keys"].to(w)),
                          self.full_window(tensors[f"window.{i}.values"].to(w))) for i in range(len(self.decoder))]
        if "feedback" in tensors:
            state.feedback = tensors["feedback"].to(w)
        return state


@register("rlt0", RLT0Config, test_overrides=dict(dim=32, heads=2, ffn_dim=48, encoder_layers=2, decoder_layers=1,
                                                  window=3, context_length=32))
class RLT0(RLT):
    """RLT-0: the same encoder, memory, decoder and readout with the merge removed (u_t = e_t)."""


# --- decoder-only baseline ----------------------------------------------------------------------------
@dataclass
class RLTBaselineConfig(LMConfig):
    arch: str = "rlt_baseline"
    vocab_size: int = 277
    dim: int = 512
    heads: int = 4
    ffn_dim: int = 1365
    layers: int = 8
    tie_embeddings: bool = True
    norm_eps: float = 1e-6
    rope_base: float = 10000.0

    def validate(self) -> None:
        super().validate()
        for name in ("dim", "heads", "ffn_dim", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.heads or (self.dim // self.heads) % 2:
            raise ValueError(f"model.dim: width {self.dim} must split into {self.heads} heads of even size (RoPE)")


@dataclass
class BaselineState(DecodeState):
    caches: list[KVCache] = field(default_factory=list)  # one per block


@register("rlt_baseline", RLTBaselineConfig,
          test_overrides=dict(dim=32, heads=2, ffn_dim=48, layers=2, context_length=32))
class RLTBaseline(CausalLM):
    """The paper's 'Transformer 8': the RLT encoder block stacked `layers` times, RMSNorm, tied readout."""

    compiled_methods = ("compute",)
    ledger = baseline_ledger

    def __init__(self, config: RLTBaselineConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.out_norm = RMSNorm(config.dim, config.norm_eps)
        self.head = None if config.tie_embeddings else nn.Linear(config.dim, config.vocab_size, bias=False)
        init_weights(self)

    def run(self, tokens: torch.Tensor, caches: list[KVCache | None]) -> torch.Tensor:
        x = self.embed(tokens)
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache)
        x = self.out_norm(x)
        return self.head(x) if self.head is not None else F.linear(x, self.embed.weight)

    def forward(self, tokens: torch.Tensor, *, rounds: int | None = None) -> torch.Tensor:
        self.resolve_rounds(rounds)
        self.check_tokens(tokens)
        return self.compute(tokens)

    def compute(self, tokens: torch.Tensor) -> torch.Tensor:
        """The full forward on validated tokens, without caches."""
        return self.run(tokens, [None] * len(self.blocks))

    def init_state(self, batch: int, *, rounds: int | None = None) -> BaselineState:
        self.resolve_rounds(rounds)
        return BaselineState(batch=batch, caches=[b.attn.new_cache(batch, self.config.context_length)
                                                  for b in self.blocks])

    def decode(self, tokens: torch.Tensor, state: BaselineState) -> torch.Tensor:
        self.check_tokens(tokens, start=state.position)
        logits = self.run(tokens, state.caches)
        state.position += tokens.shape[1]
        return logits
