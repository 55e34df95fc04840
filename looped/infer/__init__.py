"""Inference: one decoding loop with its sampling policy (decode.py), text generation, the saved decode state."""

from .decode import Decoded, SamplingPolicy, decode_loop
from .generate import decode_byte_text, encode_byte_text, generate, sample_next

__all__ = ["Decoded", "SamplingPolicy", "decode_byte_text", "decode_loop", "encode_byte_text", "generate",
           "sample_next"]
