"""Text generation from the incremental state: prefill the prompt once, then the shared decoding loop (decode.py)."""

from __future__ import annotations

import torch

from .decode import SamplingPolicy, decode_loop

SEPARATOR = 256  # WikiText row separator; rendered as a newline


def sample_next(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """(batch, vocab) logits -> (batch,) ids. temperature 0 = greedy; top_k 0 / top_p 1 = off."""
    return SamplingPolicy(temperature, top_k, top_p).sample(logits, generator)


@torch.no_grad()
def generate(model, prompt: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0, top_k: int = 0,
             top_p: float = 1.0, seed: int | None = None, rounds: int | None = None) -> torch.Tensor:
    """prompt (batch, P) ids -> (batch, P + max_new_tokens) ids."""
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError("the prompt must hold at least one token")
    limit = model.config.context_length
    if prompt.shape[1] + max_new_tokens > limit:
        raise ValueError(f"sequence too long: prompt {prompt.shape[1]} + {max_new_tokens} new tokens > "
                         f"context_length {limit}")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    policy = SamplingPolicy(temperature, top_k, top_p)
    model.eval()
    prompt = prompt.to(device)
    state = model.init_state(prompt.shape[0], rounds=rounds)
    logits = model.decode(prompt, state)[:, -1]
    return torch.cat((prompt, decode_loop(model, state, logits, max_new_tokens, policy, generator=generator).tokens),
                     dim=1)


def encode_text(text: str) -> torch.Tensor:
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)[None]


def decode_text(ids) -> str:
    data = bytes(10 if int(i) == SEPARATOR else int(i) for i in ids)
    return data.decode("utf-8", errors="replace")
