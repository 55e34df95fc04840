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
    if max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens must be >= 0, got {max_new_tokens}")
    limit = model.config.context_length
    if not slide and prompt.shape[1] + max_new_tokens > limit:
        raise ValueError(f"sequence too long: prompt {prompt.shape[1]} + {max_new_tokens} new tokens > "
                         f"context_length {limit}")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    policy = SamplingPolicy(temperature, top_k, top_p)
    model.eval()
    out = [prompt.to(device)]
    window = out[0][:, -limit:]
    remaining = max_new_tokens
    while remaining:
        state = model.init_state(prompt.shape[0], rounds=rounds)
        logits = model.decode(window, state)[:, -1]
        # sample until the window is full: the state consumes all but the last token sampled
        n = min(remaining, limit - state.position + 1)
        out.append(decode_loop(model, state, logits, n, policy, generator=generator).tokens)
        remaining -= n
        window = torch.cat(out, dim=1)[:, -max(1, limit // 2):]  # slide by half a window
    return torch.cat(out, dim=1)


def encode_byte_text(text: str) -> torch.Tensor:
    """Text as (1, n) ids of the 257-symbol corpus vocabulary (UTF-8 bytes; 256 = WikiText row separator)."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)[None]


def decode_byte_text(ids) -> str:
    """Ids of the 257-symbol corpus vocabulary as text (the separator as a newline). The 277-symbol task
    vocabulary of seed 003 has its own codec: looped.data.tasks.vocabulary.decode_task_text."""
    data = bytes(10 if int(i) == SEPARATOR else int(i) for i in ids)
    return data.decode("utf-8", errors="replace")

