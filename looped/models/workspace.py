"""The gated causal prefix workspace of seed 000 (eqs. 3-7), read by the workspace rows of models/loop.py.

Each position writes gated values into S slots of m coordinates; the running sums N = sum_{j<=i} g v and
D = sum_{j<=i} g give the causal summary M~ = N / sqrt(max(D, eps)) (eq. 4), which a content-addressed query reads
(eqs. 6-7). The retention variant blends each round's summary with the previous round's (eq. 5).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import LayerNorm

# A logit whose tanh is exactly 1.0 in float16, bfloat16, float32 and float64 (and finite in all of them)
ONE_LOGIT = 1000.0


class Workspace(nn.Module):
    """Gated causal writes into S slots of m coordinates, read by content address (eqs. 3-7).

    The path is memory-bound (its tensors are as large as the residual stream, its matmuls small), so it is
    written to touch each large tensor as few times as possible:
      * LN_w and LN_q normalise the same u: u is normalised once and each norm's gain and offset fold into
        the projection after it, W (g * x + b) + b' = (W diag g) x + (W b + b'), so the gates, the values
        and the query come from one matmul (exact up to rounding);
      * gated values and gate masses are stacked as (..., S, m+1) so one cumulative sum gives N and D;
      * the recomputed workspace never materialises M~ = N / sqrt(D): the normalisation folds into the
        (batch, length, S) slot weights, sum_s alpha_s N_s / sqrt(D_s).
    """

    def __init__(self, dim: int, slots: int, slot_dim: int, rounds: int, eps: float, ws_eps: float,
                 gamma_init: float, retention_init: float):
        super().__init__()
        self.slots, self.slot_dim, self.ws_eps = slots, slot_dim, ws_eps
        self.write_norm = LayerNorm(dim, eps)  # LN_w
        self.write = nn.Linear(dim, slots + slots * slot_dim)  # [W_g; W_v], [b_g; b_v]
        self.query_norm = LayerNorm(dim, eps)  # LN_q (same eps as LN_w: they share one normalisation)
        self.query = nn.Linear(dim, slot_dim)  # W_q, b_q
        self.keys = nn.Parameter(torch.randn(slots, slot_dim) / math.sqrt(slot_dim))  # k_s ~ N(0, 1/m)
        self.out = nn.Linear(slot_dim, dim)  # W_o, b_o
        self.gamma = nn.Parameter(torch.full((1,), float(gamma_init)))  # 1-D: FSDP cannot shard 0-d
        # R retention logits l_r; the recomputed variant carries but does not use them (Appendix B)
        logit = math.log(retention_init / (1 - retention_init))
        self.retention = nn.Parameter(torch.full((rounds,), logit))
        self.combine_norm = LayerNorm(dim, eps)  # LN_b

    def folded_projection(self) -> tuple[torch.Tensor, torch.Tensor]:
        """[W_g; W_v; W_q] with LN_w's and LN_q's gains and offsets folded in: weight (S + S m + m, d), bias."""
        weight = torch.cat((self.write.weight * self.write_norm.weight, self.query.weight * self.query_norm.weight))
        bias = torch.cat((torch.addmv(self.write.bias, self.write.weight, self.write_norm.bias),
                          torch.addmv(self.query.bias, self.query.weight, self.query_norm.bias)))
        return weight, bias

    def fold(self) -> tuple[torch.Tensor, ...]:
        """Parameter-only work of the fused read (`read_recomputed`), done once per forward / decode call
        because every round shares it: the projection to *slot logits* (the query's rows multiplied by
        k_s / sqrt(m): q . k_s / sqrt(m) = x . (W_q^T k_s) / sqrt(m) + b_q . k_s / sqrt(m)), gates and values,
        and the output projection scaled by gamma. Returns (weight^T (d, S + S + S (m+1)), bias, W_o'^T, b_o');
        the projection's columns are [slot logits | gates | values], so one `split` cuts them."""
        weight, bias = self.folded_projection()
        gv = self.slots + self.slots * self.slot_dim
        keys = self.keys / math.sqrt(self.slot_dim)  # (S, m)
        # each slot's m value rows get a constant row (weight 0, bias ONE_LOGIT): tanh of it is exactly 1, so
        # the projection's tanh yields [v | 1] per slot and one multiply by the gate gives [g v | g]
        S, m, d = self.slots, self.slot_dim, weight.shape[1]
        value_w = torch.cat((weight[S:gv].view(S, m, d), weight.new_zeros(S, 1, d)), dim=1).view(-1, d)
        value_b = torch.cat((bias[S:gv].view(S, m), bias.new_full((S, 1), ONE_LOGIT)), dim=1).view(-1)
        weight = torch.cat((keys @ weight[gv:], weight[:S], value_w))
        bias = torch.cat((keys @ bias[gv:], bias[:S], value_b))
        # stored transposed (views): each round's addmm then needs no transpose of its own
        return weight.t(), bias, (self.gamma * self.out.weight).t(), self.gamma * self.out.bias

    def read_recomputed(self, u: torch.Tensor, carry: torch.Tensor | None, folded: tuple[torch.Tensor, ...],
                        mass_settled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """u + c, with c = gamma (W_o sum_s alpha_s N_s / sqrt(max(D_s, eps)) + b_o), for u (b, l, dim), in as
        few operator calls as the equations allow (a token of decoding pays per call, views included);
        returns u + c (what LN_b normalises) and the sums [N | D] (b, l, S, m+1). The same arithmetic as
        project -> prefix_sums -> slot_weights -> read, regrouped. `mass_settled`: the carry's every D is
        already >= eps, so no D of this call can be below it and the clamp is skipped (decoding)."""
        weight_t, bias, out_weight_t, out_bias = folded
        S, m = self.slots, self.slot_dim
        b, n, d = u.shape
        rows = b * n
        # 2-D matmuls (batch * length rows): a 3-D F.linear costs several more dispatches per call
        flat_u = u.reshape(rows, d)
        x = torch.layer_norm(flat_u, (d,), None, None, self.write_norm.eps)
        logits, gates, values = torch.addmm(bias, x, weight_t).split((S, S, S * (m + 1)), 1)
        gate = torch.sigmoid(gates).unsqueeze(-1)  # (b n, S, 1)
        # [v | 1] (see fold): one multiply by the gate gives [g v | g] (g * 1 is exact), no concatenation
        value_one = torch.tanh(values).view(rows, S, m + 1)
        if n == 1 and carry is not None:  # one position: carry + g [v | 1] in one kernel
            flat = torch.addcmul(carry, gate, value_one)  # (b, S, m+1)
        else:
            flat = gate * value_one
            if n > 1:  # a running sum over one position is the position itself
                flat = flat.view(b, n, S, m + 1).cumsum(dim=1)
                if carry is not None:
                    flat = flat + carry.unsqueeze(1)
                flat = flat.view(rows, S, m + 1)
            elif carry is not None:
                flat = flat + carry
        mass = flat[..., m]  # D (b n, S), a view of the sums
        if mass_settled and carry is not None:
            inverse_norm = mass.rsqrt()
        else:
            inverse_norm = mass.clamp_min(self.ws_eps).rsqrt_()  # in place on the clamp's own output
        if torch.is_grad_enabled():  # autograd keeps softmax's output: no in-place update of it
            weights = torch.softmax(logits, dim=-1) * inverse_norm  # (b n, S)
        else:  # decoding: the same in place, one allocation fewer
            weights = torch.softmax(logits, dim=-1).mul_(inverse_norm)
        if n == 1:  # one position per row: a batched (1 x S) @ (S x m) product is one kernel
            mixed = torch.bmm(weights.unsqueeze(1), flat[..., :m]).view(rows, m)
        else:  # many positions: a broadcast multiply-sum is faster than b n tiny matmuls
            mixed = (weights.unsqueeze(-1) * flat[..., :m]).sum(dim=-2)
        # (u + b_o') + W_o' mixed accumulated in place: no bias copy and no separate residual add
        return (flat_u + out_bias).addmm_(mixed, out_weight_t).view(b, n, d), flat.view(b, n, S, m + 1)

    def project(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(batch, length, dim) -> gates g (b, l, S), values v (b, l, S, m), query q (b, l, m)  (eqs. 3, 6)."""
        x = F.layer_norm(u, u.shape[-1:], eps=self.write_norm.eps)
        projected = F.linear(x, *self.folded_projection())
        S, m = self.slots, self.slot_dim
        gate = torch.sigmoid(projected[..., :S])
        value = torch.tanh(projected[..., S:S + S * m]).unflatten(-1, (S, m))
        return gate, value, projected[..., S + S * m:]

    def prefix_sums(self, gate: torch.Tensor, value: torch.Tensor, carry: torch.Tensor | None) -> torch.Tensor:
        """Running [N | D] per slot, (batch, length, S, m+1): N = sum_{j<=i} g v, D = sum_{j<=i} g (eq. 4).

        `carry` (batch, S, m+1) holds the sums over earlier chunks (incremental decoding)."""
        gate = gate.unsqueeze(-1)
        sums = torch.cat((gate * value, gate), dim=-1).cumsum(dim=1)
        return sums if carry is None else sums + carry.unsqueeze(1)

    def inverse_norm(self, sums: torch.Tensor) -> torch.Tensor:
        """1 / sqrt(max(D, eps)) per position and slot, (batch, length, S)."""
        return sums[..., -1].clamp_min(self.ws_eps).rsqrt()

    def memory(self, sums: torch.Tensor) -> torch.Tensor:
        """M~ = N / sqrt(max(D, eps)), (batch, length, S, m)  (eq. 4)."""
        return sums[..., :-1] * self.inverse_norm(sums).unsqueeze(-1)

    def slot_weights(self, query: torch.Tensor) -> torch.Tensor:
        """alpha = softmax_s(q . k_s / sqrt(m)), (batch, length, S)  (eq. 6)."""
        return torch.softmax(query @ self.keys.t() / math.sqrt(self.slot_dim), dim=-1)

    def read(self, weights: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """c = gamma (W_o sum_s w_s slots_s + b_o)  (eq. 7); weights (b, l, S), slots (b, l, S, m).

        A broadcast multiply and sum: a batched (1 x S) @ (S x m) matmul per position is 3x slower here."""
        return self.gamma * self.out((weights.unsqueeze(-1) * slots).sum(dim=-2))

    def rho(self, r: int) -> torch.Tensor:
        return torch.sigmoid(self.retention[min(r, len(self.retention) - 1)])
