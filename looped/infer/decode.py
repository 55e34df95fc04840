"""One decoding loop for every sampler of the package: `looped generate`, `looped continue`, the RL rollouts of
seed 003 (train/objectives.sample_rollout) and the chain-of-thought side of `looped bench think`.

    policy = SamplingPolicy(temperature=0.8, top_p=0.95)      # temperature 0 = greedy; top_k 0 / top_p 1 = off
    state = model.init_state(batch); logits = model.decode(prompt, state)[:, -1]
    out = decode_loop(model, state, logits, 32, policy, generator=g, stop_token=EOS)
    out.tokens, out.log_probs, out.actions, out.consumed

Models expose only state + step (`init_state`, `decode`); the sampling policy lives here. Each sampled token is
fed back into the state before the next one is sampled, except the last one sampled (nobody reads its
prediction) unless `consume_last` asks for it. A row that sampled `stop_token` is finished: later positions
hold `pad_token` and are not actions; the loop ends once every row has finished.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class SamplingPolicy:
    temperature: float = 1.0  # 0 = greedy (argmax)
    top_k: int = 0  # keep the k most likely tokens; 0 = off
    top_p: float = 1.0  # keep the smallest set of tokens holding this much mass; 1 = off

    def __post_init__(self):
        # written so that NaN fails every test (NaN < 0 is False, and would slip through a plain `x < 0`)
        if not (self.temperature >= 0 and math.isfinite(self.temperature) and 0 < self.top_p <= 1
                and self.top_k >= 0):
            raise ValueError(f"need temperature >= 0, 0 < top_p <= 1, top_k >= 0 (got {self.temperature}, "
                             f"{self.top_p}, {self.top_k})")

    def filtered(self, logits: torch.Tensor) -> torch.Tensor:
        """(batch, vocab) logits / temperature in float32, tokens outside top-k / top-p set to -inf."""
        logits = logits.float() / self.temperature
        if self.top_k:
            kth = torch.topk(logits, min(self.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(-1)
            # drop a token when the mass before it already reaches top_p (the top token always stays)
            drop = probs.cumsum(-1) - probs >= self.top_p
            logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
        return logits

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """(batch, vocab) logits -> (batch,) token ids."""
        if self.temperature == 0:
            return logits.argmax(-1)
        return torch.multinomial(self.filtered(logits).softmax(-1), 1, generator=generator).squeeze(-1)

    def log_probs(self, logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """log mu(token) under this policy (batch,): the behaviour log-probabilities of off-policy RL."""
        if self.temperature == 0:
            raise ValueError("a greedy policy has no behaviour log-probabilities (use temperature > 0)")
        return F.log_softmax(self.filtered(logits), dim=-1).gather(-1, tokens[:, None]).squeeze(-1)


@dataclass
class Decoded:
    tokens: torch.Tensor  # (batch, k) sampled ids, pad_token after a row's stop token
    actions: torch.Tensor  # (batch, k) bool: sampled while the row was still running
    log_probs: torch.Tensor | None  # (batch, k) log mu of each action, 0 elsewhere (record_log_probs=True)
    consumed: int  # how many of the k tokens the state has consumed
    logits: torch.Tensor  # (batch, vocab) the prediction after the consumed tokens


@torch.no_grad()
def decode_loop(model, state, logits: torch.Tensor, max_new_tokens: int, policy: SamplingPolicy, *,
                generator: torch.Generator | None = None, stop_token: int | None = None, pad_token: int = 0,
                record_log_probs: bool = False, consume_last: bool = False) -> Decoded:
    """Sample up to `max_new_tokens` from `logits` (batch, vocab), the model's prediction after what `state` has
    consumed, feeding each token back with `model.decode` (see the module docstring)."""
    batch = logits.shape[0]
    alive = torch.ones(batch, dtype=torch.bool, device=logits.device)
    tokens, actions, log_probs, consumed = [], [], [], 0
    for i in range(max_new_tokens):
        token = torch.where(alive, policy.sample(logits, generator), pad_token)
        tokens.append(token)
        actions.append(alive.clone())
        if record_log_probs:
            log_probs.append(torch.where(alive, policy.log_probs(logits, token), 0.0))
        if stop_token is not None:
            alive &= token != stop_token
        if not bool(alive.any()) or (i + 1 == max_new_tokens and not consume_last):
            break
        logits = model.decode(token[:, None], state)[:, -1]
        consumed += 1
    empty = logits.new_zeros(batch, 0, dtype=torch.long)
    return Decoded(torch.stack(tokens, 1) if tokens else empty,
                   torch.stack(actions, 1) if actions else empty.bool(),
                   torch.stack(log_probs, 1) if record_log_probs and log_probs else None, consumed, logits)


__all__ = ["Decoded", "SamplingPolicy", "decode_loop"]
