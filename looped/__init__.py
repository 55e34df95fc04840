"""looped: looped and recurrent Transformers."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `looped.from_pretrained` without importing torch and the whole package at `import looped`.
    if name == "from_pretrained":
        import importlib

        return importlib.import_module("looped.train.pretrained").from_pretrained
    raise AttributeError(f"module 'looped' has no attribute {name!r}")
