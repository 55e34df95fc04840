"""Data layer: corpora as 257-symbol streams, fixed-size blocks, training order, downloads.

Typical use::

    streams = load_streams(cfg)                       # cfg: DataConfig
    train_blocks, heldout_blocks = make_blocks(streams, cfg.block_size)
    sampler = make_sampler(cfg, len(train_blocks))    # after model init (historical mode)
    batch = train_blocks[sampler.next_indices(batch_size)]
"""

from .blocks import (
    BlockSampler,
    check_symbols,
    heldout_batches,
    load_heldout,
    log_to_stderr,
    make_blocks,
    make_sampler,
    to_blocks,
)
from .corpora import (
    BLOCK_SIZE,
    ENWIK8_SIZE,
    ENWIK8_SPLIT,
    KJV_HELDOUT_BOOKS,
    SEPARATOR,
    VOCAB_SIZE,
    ByteStreams,
    DataConfig,
    DataError,
    bytes_to_stream,
    encode_wikitext_rows,
    enwik8_split,
    kjv_streams,
    load_streams,
    read_bytes,
    read_enwik8,
    read_parquet_rows,
)
from .download import DATASETS, RemoteFile, config_for, download

__all__ = [
    "BLOCK_SIZE",
    "DATASETS",
    "ENWIK8_SIZE",
    "ENWIK8_SPLIT",
    "KJV_HELDOUT_BOOKS",
    "SEPARATOR",
    "VOCAB_SIZE",
    "BlockSampler",
    "ByteStreams",
    "DataConfig",
    "DataError",
    "RemoteFile",
    "bytes_to_stream",
    "check_symbols",
    "config_for",
    "download",
    "encode_wikitext_rows",
    "enwik8_split",
    "heldout_batches",
    "kjv_streams",
    "load_heldout",
    "load_streams",
    "log_to_stderr",
    "make_blocks",
    "make_sampler",
    "read_bytes",
    "read_enwik8",
    "read_parquet_rows",
    "to_blocks",
]
