"""The decode-state file of `looped continue` (seed 003 Appendix E): save, load, the weights fingerprint, and
the multi-turn continuation that reads and writes it.

A state file holds everything Appendix E lists for reuse at fixed weights: every encoder KV cache, the
encoder memory, each decoder layer's SWA window, the feedback register, the consumed tokens and position,
the sampler's random state, the model's configuration and a fingerprint of its weights. A token that was
sampled but not yet consumed (generation stopped) is kept as `pending` and consumed first next time
(Appendix F.2). A state saved by another model, another chunk size B or other weights is refused in one line.
The file is written to a temporary name and renamed, so an interrupted call never leaves half a state.

Written against the model protocol: `model.state_to_tensors(state)` and `model.state_from_tensors(tensors, meta)`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from ..data.tasks.vocabulary import BOS, EOS
from ..io import atomic_path
from .decode import SamplingPolicy, decode_loop

STATE_KEY = "looped_rlt_state"


def weights_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over the weights (name, dtype, shape, bytes): a state is only valid for the weights that built it."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()[:16]


def save_state(path: Path, model, state, *, history: torch.Tensor, pending: torch.Tensor,
               generator: torch.Generator) -> None:
    """Write the complete continuation state to `path` atomically (safetensors, metadata as JSON)."""
    from safetensors.torch import save_file

    tensors, meta = model.state_to_tensors(state)
    tensors = {f"state.{k}": v.cpu() for k, v in tensors.items()}
    tensors.update(history=history.cpu(), pending=pending.cpu(), sampler=generator.get_state())
    meta.update(weights=weights_fingerprint(model), format=1)
    with atomic_path(Path(path)) as tmp:
        save_file(tensors, tmp, metadata={STATE_KEY: json.dumps(meta)})


def load_state(path: Path, model):
    """(state, history, pending, generator) from a file written by save_state; ValueError (one line) when the
    file is not a state or does not fit `model`."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), "pt") as f:
            raw = (f.metadata() or {}).get(STATE_KEY)
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{path}: not a readable state file ({str(err).splitlines()[0]})") from None
    if raw is None:
        raise ValueError(f"{path}: not a looped state file (no {STATE_KEY} metadata)")
    meta = json.loads(raw)
    try:  # architecture, shape, window, chunk size B ... (the model names the first field that differs)
        state = model.state_from_tensors({k[len("state."):]: v for k, v in tensors.items() if k.startswith("state.")},
                                         meta)
    except (ValueError, KeyError) as err:
        raise ValueError(f"{path}: refusing a state from another model ({str(err).splitlines()[0]})") from None
    if meta.get("weights") != weights_fingerprint(model):
        raise ValueError(f"{path}: refusing a state from another model (weights {meta.get('weights')} in the state, "
                         f"{weights_fingerprint(model)} here)")
    generator = torch.Generator()
    generator.set_state(tensors["sampler"])
    return state, tensors["history"], tensors["pending"], generator


def continue_conversation(model, state_path: Path, prompt: list[int], *, max_new_tokens: int = 32,
                          temperature: float = 1.0, seed: int = 0, stop_token: int | None = None) -> dict:
    """Consume (pending +) prompt tokens, sample up to `max_new_tokens`, save the state; return what happened.

    A new state file starts an independent sequence with BOS (H_0 = (s*, empty))."""
    if max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens must be >= 0, got {max_new_tokens}")
    if not getattr(model, "saves_state", False):
        raise ValueError(f"{model.arch_name} cannot save its decode state (rlt, rlt0 and mixture_of_recursions can)")
    model.eval()
    state_path = Path(state_path)
    if state_path.exists():
        state, history, pending, generator = load_state(state_path, model)
        feed = pending[0].tolist() + list(prompt)
    else:
        state, history, generator = model.init_state(1), torch.zeros(1, 0, dtype=torch.long), torch.Generator()
        generator.manual_seed(seed)
        feed = [BOS, *prompt]
    if not feed:
        raise ValueError("nothing to consume: give --prompt (the previous turn left no pending token)")
    with torch.no_grad():
        tokens = torch.tensor([feed], dtype=torch.long)
        logits = model.decode(tokens, state)[:, -1]
        out = decode_loop(model, state, logits, max_new_tokens, SamplingPolicy(temperature), generator=generator,
                          stop_token=EOS if stop_token is None else stop_token)
    # the last sampled token stays pending: the state covers consumed tokens only (F.2)
    history = torch.cat((history, tokens, out.tokens[:, :out.consumed]), dim=1)
    generated = out.tokens[0].tolist()
    pending = torch.tensor([generated[-1:]], dtype=torch.long).view(1, -1)
    save_state(state_path, model, state, history=history, pending=pending, generator=generator)
    return {"generated": generated, "position": state.position, "pending": pending[0].tolist()}


__all__ = ["STATE_KEY", "continue_conversation", "load_state", "save_state", "weights_fingerprint"]
