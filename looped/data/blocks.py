"""Cutting symbol streams into fixed-size blocks, and the order in which training visits them.

A block holds ``block_size`` symbols (513 by default): the model reads the first 512
and predicts the last 512. Streams are cut into non-overlapping blocks; the incomplete
trailing block is dropped.

Training samples blocks without replacement from a random permutation; when the
training budget needs more blocks than exist, a new permutation is drawn (and logged).
The permutation comes either from torch's global RNG (``historical``, the paper's
original behaviour, so the data order depends on everything else drawn from that
stream) or from a private generator seeded with ``data_seed`` (``independent``).
"""

import sys
from collections.abc import Callable, Iterator

import numpy as np
import torch

from .corpora import BLOCK_SIZE, VOCAB_SIZE, ByteStreams, DataConfig, DataError, load_streams

Log = Callable[[str], None]


def log_to_stderr(message: str) -> None:
    """Default `log` callable: one line on stderr."""
    print(message, file=sys.stderr, flush=True)


def to_blocks(
    stream: np.ndarray | torch.Tensor,
    block_size: int = BLOCK_SIZE,
    *,
    name: str = "stream",
    dtype: torch.dtype = torch.long,
) -> torch.Tensor:
    """`stream` cut into a (num_blocks, block_size) tensor; the incomplete tail is dropped.

    Raises DataError naming `name` when the stream does not fill a single block.
    """
    if block_size < 2:
        raise DataError(f"{name}: block size must be >= 2, got {block_size}")
    if stream.ndim != 1:
        raise DataError(f"{name}: expected a 1-D symbol stream, got shape {tuple(stream.shape)}")
    length = int(stream.shape[0])
    num_blocks = length // block_size
    if length == 0:
        raise DataError(f"{name}: the stream is empty")
    if num_blocks == 0:
        raise DataError(f"{name}: only {length:,} symbols, fewer than one block of {block_size}")
    used = stream[: num_blocks * block_size]
    if isinstance(used, np.ndarray):
        # Widen in numpy: torch has limited support for uint16 tensors.
        used = torch.from_numpy(used.astype(np.int64))
    return used.to(dtype).reshape(num_blocks, block_size)


def check_symbols(
    symbols: np.ndarray | torch.Tensor, vocab_size: int = VOCAB_SIZE, *, name: str = "stream"
) -> None:
    """Raise DataError naming the first (flat) offset whose id is outside [0, vocab_size)."""
    if isinstance(symbols, torch.Tensor):
        flat = symbols.detach().reshape(-1)
    else:
        flat = np.asarray(symbols).reshape(-1)
    if len(flat) == 0:
        return
    # Fast path without temporaries: streams are hundreds of millions of symbols long.
    if int(flat.min()) >= 0 and int(flat.max()) < vocab_size:
        return
    bad = (flat < 0) | (flat >= vocab_size)
    # nonzero() is (k, 1) for a torch vector and a 1-tuple of arrays for numpy: [0][0] is the first hit in both.
    offset = int(bad.nonzero()[0][0])
    value = int(flat[offset])
    raise DataError(f"{name}: symbol id {value} at offset {offset:,} is outside the vocabulary [0, {vocab_size})")


def load_heldout(cfg: DataConfig) -> tuple[torch.Tensor, str]:
    """(held-out blocks, unit) of the corpus `cfg` describes: what a run trained on it is scored on."""
    streams = load_streams(cfg)
    return to_blocks(streams.heldout, cfg.block_size, name=f"{streams.name} held-out"), streams.unit


def make_blocks(streams: ByteStreams, block_size: int = BLOCK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(train_blocks, heldout_blocks) of a corpus, after checking every symbol id."""
    out = []
    for part, stream in (("train", streams.train), ("held-out", streams.heldout)):
        name = f"{streams.name} {part} stream"
        check_symbols(stream, name=name)
        out.append(to_blocks(stream, block_size, name=name))
    return out[0], out[1]


class BlockSampler:
    """Training block indices: a random permutation, consumed in order, redrawn when used up.

    ``generator=None`` draws permutations from torch's global CPU RNG (historical mode);
    a ``torch.Generator`` keeps the data order independent of everything else.
    The first permutation is drawn lazily by the first ``next_indices`` call, so in
    historical mode it comes after whatever the caller drew before (model init).

    ``epoch`` counts the permutations drawn so far (0 before the first draw);
    ``position`` is how many indices of the current permutation have been handed out.
    """

    def __init__(self, num_blocks: int, generator: torch.Generator | None, log: Log = log_to_stderr) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise DataError(f"sampler: need at least one training block, got {num_blocks!r}")
        self.num_blocks = num_blocks
        self.generator = generator
        self.log = log
        self.permutation: torch.Tensor | None = None
        self.position = 0
        self.epoch = 0

    def _draw(self) -> None:
        # device="cpu" pins the global CPU generator even if a default device is set.
        self.permutation = torch.randperm(self.num_blocks, generator=self.generator, device="cpu")
        self.position = 0
        self.epoch += 1

    def next_indices(self, n: int) -> torch.Tensor:
        """The next `n` block indices (int64), crossing into a fresh permutation if needed."""
        if n < 0:
            raise ValueError(f"next_indices: n must be >= 0, got {n}")
        if self.permutation is None:
            self._draw()
        pieces = []
        remaining = n
        while remaining > 0:
            # Reshuffle only when more indices are actually needed, so a budget of exactly
            # one pass never reports a reshuffle.
            if self.position == self.num_blocks:
                self.log(
                    f"sampler: all {self.num_blocks:,} training blocks used once; reshuffling (epoch {self.epoch + 1})"
                )
                self._draw()
            assert self.permutation is not None
            take = min(remaining, self.num_blocks - self.position)
            pieces.append(self.permutation[self.position : self.position + take])
            self.position += take
            remaining -= take
        return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.long)

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        """Everything needed to continue the index sequence exactly (see load_state_dict).

        The global RNG of historical mode is not included: the trainer saves it itself.
        """
        state: dict[str, torch.Tensor | int] = {
            "num_blocks": self.num_blocks,
            "epoch": self.epoch,
            "position": self.position,
            # An empty tensor stands for "not drawn yet" (epoch 0).
            "permutation": (
                self.permutation.clone() if self.permutation is not None else torch.zeros(0, dtype=torch.long)
            ),
        }
        if self.generator is not None:
            state["generator_state"] = self.generator.get_state()
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor | int]) -> None:
        """Restore a `state_dict()`; later indices match those the saved sampler would give."""
        num_blocks, epoch, position = (int(state[k]) for k in ("num_blocks", "epoch", "position"))
        permutation = torch.as_tensor(state["permutation"], dtype=torch.long).clone()
        if num_blocks != self.num_blocks:
            raise DataError(
                f"sampler checkpoint: saved for {num_blocks:,} training blocks, the data now has "
                f"{self.num_blocks:,} (different data config?)"
            )
        has_generator_state = "generator_state" in state
        if has_generator_state != (self.generator is not None):
            saved = "independent" if has_generator_state else "historical"
            raise DataError(f"sampler checkpoint: saved in {saved} mode, but this run uses the other sampler mode")
        if epoch == 0:
            self.permutation = None
        elif permutation.shape != (num_blocks,) or not 0 <= position <= num_blocks:
            raise DataError("sampler checkpoint: permutation or position is corrupt")
        else:
            self.permutation = permutation
        if self.generator is not None:
            state_bytes = state["generator_state"]
            assert isinstance(state_bytes, torch.Tensor)
            self.generator.set_state(state_bytes.clone())
        self.epoch = epoch
        self.position = position if epoch > 0 else 0


def make_sampler(cfg: DataConfig, num_blocks: int, *, log: Log = log_to_stderr) -> BlockSampler:
    """The sampler `cfg.sampler` asks for (a private generator seeded with data_seed if independent)."""
    generator = None
    if cfg.sampler == "independent":
        if cfg.data_seed is None:
            raise DataError("data.data_seed: required when data.sampler is 'independent'")
        generator = torch.Generator().manual_seed(cfg.data_seed)
    return BlockSampler(num_blocks, generator, log=log)


def heldout_batches(blocks: torch.Tensor, batch_size: int, max_batches: int = 0) -> Iterator[torch.Tensor]:
    """Consecutive (b, block_size) slices of `blocks` in order; the last may be shorter.

    ``max_batches`` > 0 stops after that many batches (quick evals); 0 means all.
    """
    if batch_size < 1:
        raise ValueError(f"heldout_batches: batch_size must be >= 1, got {batch_size}")
    if max_batches < 0:
        raise ValueError(f"heldout_batches: max_batches must be >= 0, got {max_batches}")
    for count, start in enumerate(range(0, len(blocks), batch_size)):
        if max_batches and count >= max_batches:
            return
        yield blocks[start : start + batch_size]
