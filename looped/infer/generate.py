"""Sampling from the incremental state: prefill the prompt once, then one token per `decode` call."""

from __future__ import annotations

import torch

SEPARATOR = 256  # WikiText row separator; rendered as a newline


def sample_next(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """(batch, vocab) logits -> (batch,) ids. temperature 0 = greedy; top_k 0 / top_p 1 = off."""
    if temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
        raise ValueError(f"need temperature >= 0, 0 < top_p <= 1, top_k >= 0 (got {temperature}, {top_p}, {top_k})")
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass before it already reaches top_p (the top token always stays)
        drop = probs.cumsum(-1) - probs >= top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(model, prompt: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0, top_k: int = 0,
             top_p: float = 1.0, seed: int | None = None, rounds: int | None = None,
             slide: bool = True) -> torch.Tensor:
    """prompt (batch, P) ids -> (batch, P + max_new_tokens) ids.

    Past the context window (slide=True) the window slides: when the state holds context_length positions,
    a fresh state is prefilled with the last half window of tokens and sampling goes on from there, so the
    model always conditions on between half and a whole window of the most recent text (a prompt longer than
    the window is cut to its last context_length tokens). Re-prefilling every half window, rather than every
    token, keeps the cost per new token within a constant factor of plain incremental decoding.
    slide=False refuses a sequence that does not fit instead."""
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError("the prompt must hold at least one token")
    limit = model.config.context_length
    if not slide and prompt.shape[1] + max_new_tokens > limit:
        raise ValueError(f"sequence too long: prompt {prompt.shape[1]} + {max_new_tokens} new tokens > "
                         f"context_length {limit}")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    model.eval()
    prompt = prompt.to(device)
    state = model.init_state(prompt.shape[0], rounds=rounds)
    logits = model.decode(prompt[:, -limit:], state)[:, -1]
    out = [prompt]
    for i in range(max_new_tokens):
        token = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
        out.append(token[:, None])
        if i + 1 == max_new_tokens:
            break
        if state.position < limit:
            logits = model.decode(token[:, None], state)[:, -1]
        else:  # the window is full: slide it by half
            state = model.init_state(prompt.shape[0], rounds=rounds)
            logits = model.decode(torch.cat(out, dim=1)[:, -max(1, limit // 2):], state)[:, -1]
    return torch.cat(out, dim=1)


def encode_text(text: str) -> torch.Tensor:
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)[None]


def decode_text(ids) -> str:
    data = bytes(10 if int(i) == SEPARATOR else int(i) for i in ids)
    return data.decode("utf-8", errors="replace")
