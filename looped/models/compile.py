"""`train.compile: true`: torch.compile on the pure-tensor regions each architecture declares.

Every model class lists, in `compiled_methods`, the methods that hold its arithmetic and nothing else:
no input validation (the token-range check reads tensor values, a graph break), no incremental-state
objects, no Python loop over a depth that changes from call to call. `compile_model` replaces each of them
on the instance with its compiled version, so checkpoints, DDP and the training loop see the same module.

What is compiled, and what recompiles when:
  fixed depth (transformer, rlt_baseline, fixed_transformer, gnn)  the whole stack of blocks, one graph;
      a new batch size or length recompiles once (then that dimension is dynamic).
  looped LMs and the DRT cores (shared_loop ... workspace_retention, drt, drt_tied, ut_act)  one round /
      step; the loop over rounds runs in Python around it, so a new `rounds` / `steps` value reuses the
      graph. The round index is an int: round 0 compiles once, round 1 recompiles once with the index
      dynamic, later rounds reuse it.
  rlt, rlt0  the per-chunk decoder step (feedback merge + every decoder layer, attention included): the
      windows are fixed (W-1)-slot buffers and every chunk of a call reads the memory at one span, so all
      positions of a training step run one graph (plus one for the first position, whose feedback is s*).
      A second training length recompiles once with the memory span and chunk size dynamic; later lengths
      reuse it. The encoder, memory projections and readout run eager, once per call.
  lstm  the readout (nn.LSTM is one fused operator, and Dynamo does not trace it).
Under torch.inference_mode / no_grad (evaluation) each region compiles once more. Decoding with an
incremental state (`decode`) stays eager.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def compile_model(model: nn.Module, **options: Any) -> nn.Module:
    """Compile `model.compiled_methods` in place (options go to torch.compile); returns the model."""
    names = getattr(type(model), "compiled_methods", None)
    if not names:
        raise ValueError(f"{type(model).__name__} declares no compiled_methods: train.compile is not supported")
    for name in names:  # an instance attribute shadows the class's method: state_dict and DDP are unchanged
        setattr(model, name, torch.compile(getattr(model, name), **options))
    return model
