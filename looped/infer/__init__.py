"""Inference: sampling on the incremental state."""

from .generate import decode_text, encode_text, generate, sample_next

__all__ = ["decode_text", "encode_text", "generate", "sample_next"]
