"""Train a looped byte-level language model and sample from it, in one file, top to bottom.

    python examples/train_minimal.py                                 # shared_loop, ~1 min on 2 CPU cores
    python examples/train_minimal.py --arch workspace --steps 600    # seed 000's causal latent workspace

The defaults (280,704 parameters, 400 updates of 16 x 128 bytes) trained in 65 s on one thread of a 2-core
machine running two other jobs and scored 2.64 held-out bits/byte (the first 256 held-out blocks).

This is the view of `looped train` without the machinery: the data, the model, the optimizer loop, the
held-out score and the sampler are the library's pieces, called in the order a training script calls them.
What `looped train` adds on top: checkpoints and bit-identical resume, the seeded data order, DDP / FSDP,
progress lines, W&B, `metrics.jsonl` and the best-checkpoint choice (looped/train/trainer.py).
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from looped.data import DataConfig, load_streams, to_blocks
from looped.eval.lm import evaluate_lm
from looped.infer.decode import SamplingPolicy
from looped.infer.generate import decode_byte_text, encode_byte_text
from looped.models import arch_names, build_model, get_arch
from looped.models.loop import LoopConfig
from looped.train.schedule import learning_rate
from looped.train.tasks import LMTrainTask
from looped.train.trainer import param_groups


def looped_rows() -> list[str]:
    """The registered rows built on seed 000's shared loop (they share LoopConfig's fields: dim, rounds ...)."""
    return [name for name in arch_names("lm") if issubclass(get_arch(name).config_cls, LoopConfig)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train and sample a looped byte LM on the embedded KJV.")
    p.add_argument("--arch", default="shared_loop", choices=looped_rows(), help="a looped row of seed 000")
    p.add_argument("--steps", type=int, default=400, help="optimizer updates")
    p.add_argument("--batch-size", type=int, default=16, help="blocks per update")
    p.add_argument("--context", type=int, default=128, help="bytes the model reads per block")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn-dim", type=int, default=512)
    p.add_argument("--rounds", type=int, default=4, help="times the shared block is applied (training depth)")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--eval-blocks", type=int, default=256, help="held-out blocks scored at the end (0: all)")
    p.add_argument("--sample-bytes", type=int, default=100, help="bytes to sample after the prompt")
    p.add_argument("--prompt", default="1:1 In the beginning")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if min(args.steps, args.batch_size, args.context, args.sample_bytes) < 1 or not args.temperature >= 0:
        p.error("--steps, --batch-size, --context and --sample-bytes must be >= 1, --temperature >= 0")
    if len(args.prompt.encode("utf-8")) + args.sample_bytes - 1 > args.context:
        # the sampler below keeps one incremental state, so prompt and sample must fit one context window
        # (looped.infer.generate slides the window for longer samples)
        p.error(f"--prompt plus --sample-bytes ({args.sample_bytes}) must fit --context ({args.context} bytes)")
    return args


def load_blocks(context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The embedded King James Bible as (train, held-out) blocks of context + 1 bytes.

    Blocks hold one byte more than the model reads: it reads bytes 0..n-1 and predicts bytes 1..n. The split is
    by whole books (every 8th book held out), so the held-out score is on text the model never saw."""
    streams = load_streams(DataConfig(corpus="kjv", block_size=context + 1))
    train = to_blocks(streams.train, context + 1, name="kjv train")
    heldout = to_blocks(streams.heldout, context + 1, name="kjv held-out")
    return train, heldout


def make_model(args: argparse.Namespace):
    """The row's config from the registry, with the sizes the flags give; every other field its default."""
    config = get_arch(args.arch).config_cls(arch=args.arch, vocab_size=257, context_length=args.context,
                                            dim=args.dim, heads=args.heads, ffn_dim=args.ffn_dim, rounds=args.rounds)
    config.validate()  # one clear message for e.g. a width the heads do not divide
    return build_model(config)


def train(model, blocks: torch.Tensor, args: argparse.Namespace) -> None:
    """A plain AdamW loop: random blocks, the library's next-byte loss, warm-up then cosine decay."""
    # No weight decay on embeddings, norms and per-channel vectors: the trainer's own parameter groups.
    optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=args.lr, betas=(0.9, 0.95))
    warmup = min(50, args.steps // 10)
    model.train()
    start = time.perf_counter()
    for step in range(args.steps):
        for group in optimizer.param_groups:  # a pure function of the step, so there is nothing to save
            group["lr"] = learning_rate(step, lr=args.lr, total_steps=args.steps, warmup_steps=warmup,
                                        schedule="cosine", min_lr=args.lr / 10)
        batch = blocks[torch.randint(len(blocks), (args.batch_size,))].long()
        loss = LMTrainTask.loss(model, batch)  # mean cross-entropy of every next byte, in nats
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # a looped block sees R gradients per step
        optimizer.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:>5}  loss {loss.item():.4f}  ({loss.item() / math.log(2):.3f} bits/byte)  "
                  f"{time.perf_counter() - start:.0f} s", flush=True)


@torch.no_grad()
def sample(model, prompt: str, n: int, temperature: float, seed: int) -> bytes:
    """`n` bytes after `prompt`, one at a time from the incremental state (the prompt is read once).

    The state holds, for every round of the loop, the shared block's key/value cache (and the workspace rows'
    running sums), so each new byte costs one position of work per round instead of re-reading the text."""
    model.eval()
    policy = SamplingPolicy(temperature=temperature)
    generator = torch.Generator().manual_seed(seed)
    state = model.init_state(1)
    logits = model.decode(encode_byte_text(prompt), state)[:, -1]  # prefill: the whole prompt in one call
    out = []
    for i in range(n):
        token = policy.sample(logits, generator)  # (1,) from the prediction after everything consumed so far
        out.append(int(token))
        if i + 1 < n:  # feed it back (the state advances by one byte); nobody reads the last byte's prediction
            logits = model.decode(token[:, None], state)[:, -1]
    return bytes(out)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    train_blocks, heldout_blocks = load_blocks(args.context)
    model = make_model(args)
    print(f"{args.arch}: {model.parameter_counts()['total']:,} parameters, {args.rounds} rounds; "
          f"{len(train_blocks):,} training blocks of {args.context + 1} bytes")
    train(model, train_blocks, args)
    # Seed 000's eq. 9: the summed negative log-likelihood of every scored held-out byte / their count / ln 2.
    scored = heldout_blocks[:args.eval_blocks] if args.eval_blocks else heldout_blocks
    result = evaluate_lm(model, scored, batch_size=32)
    print(f"held-out bits/byte: {result['bits_per_byte']:.4f} ({result['blocks']:,} blocks, "
          f"{result['targets']:,} bytes scored)")
    text = sample(model, args.prompt, args.sample_bytes, args.temperature, args.seed)
    print(f"sample ({len(text)} bytes): {args.prompt}{decode_byte_text(text)}")
    return {"bits_per_byte": result["bits_per_byte"], "sample": text}


if __name__ == "__main__":
    main()
