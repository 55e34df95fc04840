"""Toy probe: does RLT-1's feedback path learn parity and carry it far beyond the training lengths?

A deliberately small setting, outside the task pipeline so each variation runs in a minute or two on one CPU
thread: bits in, a two-way readout (logits of symbols 0 and 1) at every bit, length curriculum from 2 bits up to
--max-length, test at 16, 64 and 256 bits. Results of the runs we made are in results/rlt_cpu/parity_probes.md.

    .venv/bin/python scripts/probes/rlt_parity_toy.py --arch rlt --supervision final --ramp 30 --lr 1e-3
    .venv/bin/python scripts/probes/rlt_parity_toy.py --arch rlt --no-cross-attention ...   # ablation
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from looped.models import build_model
from looped.models.rlt import MemoryAttention, RLT0Config, RLTConfig

# The task pipeline's symbols (looped.data.tasks.algorithmic): 277 symbols, bits as ASCII '0' / '1'.
VOCAB, BOS, ZERO, EQUALS = 277, 256, ord("0"), ord("=")


def parity_batch(n: int, length: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens (n, 1 + length): BOS then bits; targets (n, length): the running parity after each bit, as symbols."""
    bits = torch.randint(0, 2, (n, length), generator=generator)
    return torch.cat([torch.full((n, 1), BOS), bits + ZERO], 1), bits.cumsum(1) % 2 + ZERO


def scored(model, tokens: torch.Tensor, equals: bool) -> torch.Tensor:
    """Logits (batch, length, symbols) aligned with the targets: at each bit, or with `equals` the last
    position is '=' (the one the task pipeline scores) instead of the last bit."""
    if not equals:
        return model(tokens)[:, 1:]
    logits = model(torch.cat([tokens, torch.full_like(tokens[:, :1], EQUALS)], 1))
    return logits[:, 2:]


def readout(logits: torch.Tensor, targets: torch.Tensor, full: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, targets) over all symbols, or over '0' and '1' only (targets then 0 / 1)."""
    return (logits, targets) if full else (logits[..., ZERO:ZERO + 2], targets - ZERO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("rlt", "rlt0"), default="rlt")
    parser.add_argument("--supervision", choices=("final", "every"), default="final",
                        help="final: the last bit's parity only (the paper's parity); every: running parity")
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--max-length", type=int, default=40)
    parser.add_argument("--ramp", type=int, default=30, help="updates per +1 of the longest training length")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--no-cross-attention", action="store_true",
                        help="ablation: the decoder's cross-attention to encoder memory outputs zeros")
    parser.add_argument("--full-readout", action="store_true",
                        help="cross-entropy over all 277 symbols, as the task pipeline (default: over '0' and '1')")
    parser.add_argument("--equals", action="store_true",
                        help="as the task rows: '=' after the bits, the final parity read at '=' (implies --supervision final)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.equals:
        args.supervision = "final"  # the other positions are not aligned with a target

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    if args.no_cross_attention:
        MemoryAttention.forward = lambda self, x, rope, memory, mask: torch.zeros_like(x)
    config = (RLTConfig if args.arch == "rlt" else RLT0Config)(
        arch=args.arch, vocab_size=VOCAB, dim=32, heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=1, window=4,
        context_length=300)
    model = build_model(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    data = torch.Generator().manual_seed(args.seed + 1)
    start = time.perf_counter()
    for update in range(args.updates):
        longest = min(args.max_length, 2 + update // args.ramp)
        tokens, targets = parity_batch(32, int(torch.randint(2, longest + 1, (1,), generator=data)), data)
        logits, targets = readout(scored(model, tokens, args.equals), targets, args.full_readout)
        if args.supervision == "final":
            loss = F.cross_entropy(logits[:, -1], targets[:, -1])
        else:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if update % 200 == 0:
            print(f"update {update:5d}  longest {longest:3d}  loss {loss.item():.4f}", flush=True)
    with torch.no_grad():
        for length in (16, 64, 256):
            tokens, targets = parity_batch(256, length, torch.Generator().manual_seed(99))
            logits, targets = readout(scored(model, tokens, args.equals), targets, args.full_readout)
            right = logits.argmax(-1) == targets
            print(f"{args.arch} {length:3d} bits: final-bit accuracy {right[:, -1].float().mean():.3f}, "
                  f"every-prefix accuracy {right.float().mean():.3f}")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
