"""looped: looped and recurrent Transformers."""

__version__ = "0.1.0"
