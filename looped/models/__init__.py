"""Model families and the registry that maps an architecture name to its config and class."""

from .base import CausalLM, DecodeState, LMConfig
from .registry import Arch, arch_names, build_model, get_arch, model_config_from_dict, register
from .transformer import Transformer, TransformerConfig

__all__ = ["CausalLM", "DecodeState", "LMConfig", "Arch", "arch_names", "build_model", "get_arch",
           "model_config_from_dict", "register", "Transformer", "TransformerConfig"]
