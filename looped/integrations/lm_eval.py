"""lm-evaluation-harness adapter (the optional `looped[eval]` extra): a byte-level `looped` checkpoint as the
lm-eval model `looped`.

    import looped.integrations.lm_eval  # registers the model name
    lm_eval.simple_evaluate(model="looped", model_args="pretrained=hf:ORG/NAME,rounds=8", tasks=[...])

or from the shell `looped lm-eval RUN --tasks ... --rounds 2 4 8` (one JSON, one result per depth).

Tokens are UTF-8 bytes. The models have no BOS, so every document starts after a newline byte (10): it is the
first input, never a target. Contexts longer than the model's context are cut from the left; a long document is
scored in lm-eval's rolling windows (every byte predicted once, each window after the first with a full context
of earlier bytes), unlike seed 000 eq. 9, which scores a corpus as independent 513-byte blocks whose first
target sees one byte of context.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
except ImportError as err:  # the extra is missing: one line naming the fix
    raise ImportError("the lm-eval adapter needs lm-eval: pip install 'looped[eval]'") from err

NEWLINE = 10  # what every document starts after (the models have no BOS)


def to_bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


@register_model("looped")
class HarnessLM(LM):
    """model_args: pretrained=PATH_OR_HF_ID (run, checkpoint or hf:ORG/NAME[@REV]), rounds=R (test-time depth of a
    looped row; default: as trained), exit_threshold=T (early exit, scoring only), which=last|best, batch_size."""

    def __init__(self, pretrained: str | None = None, rounds=None, exit_threshold=None, which: str | None = None,
                 batch_size=8, device: str | None = None, model=None, **_ignored):
        super().__init__()
        if model is None:
            if pretrained is None:
                raise ValueError("model_args: pretrained=PATH_OR_HF_ID is required")
            from ..train.pretrained import from_pretrained

            model, _ = from_pretrained(str(pretrained), which=which, device=device or "cpu")
        self.model = model.eval()
        self.rounds = None if rounds in (None, "", "None") else int(rounds)
        self.exit_threshold = None if exit_threshold in (None, "", "None") else float(exit_threshold)
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else 8  # "auto" -> a fixed size
        self.context = model.config.context_length
        self.torch_device = next(model.parameters()).device

    # --- scoring ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def _logits(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.exit_threshold is None:
            return self.model(inputs, rounds=self.rounds)
        return self.model.forward_early_exit(inputs, self.exit_threshold, rounds=self.rounds)[0]

    def score(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(context bytes, continuation bytes) -> (log P(continuation | context), whether greedy decoding would
        produce it). The context starts after a newline; the last context_length inputs are kept. Batches are
        padded on the right: the models are causal, so padding changes no scored logit."""
        out: list[tuple[float, bool]] = []
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start:start + self.batch_size]
            too_long = next((len(cont) for _, cont in chunk if len(cont) > self.context), None)
            if too_long:
                raise ValueError(f"a continuation of {too_long} bytes does not fit the model's context of "
                                 f"{self.context}")
            rows = [([NEWLINE] + ctx + cont)[-(self.context + 1):] for ctx, cont in chunk]
            width = max(len(r) - 1 for r in rows)
            inputs = torch.zeros(len(rows), width, dtype=torch.long)
            for i, row in enumerate(rows):
                inputs[i, :len(row) - 1] = torch.tensor(row[:-1])
            logprobs = F.log_softmax(self._logits(inputs.to(self.torch_device)).float(), dim=-1)  # (b, width, vocab)
            for i, ((_, cont), row) in enumerate(zip(chunk, rows)):
                end = len(row) - 1
                scored = logprobs[i, end - len(cont):end]  # (len(cont), vocab)
                target = torch.tensor(cont, device=scored.device)
                out.append((scored.gather(-1, target[:, None]).sum().item(),
                            bool((scored.argmax(-1) == target).all())))
        return out

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        return self.score([(to_bytes(r.args[0]), to_bytes(r.args[1])) for r in requests])

    def loglikelihood_rolling(self, requests) -> list[float]:
        results = []
        for request in requests:
            windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                to_bytes(request.args[0]), prefix_token=NEWLINE, max_seq_len=self.context, context_len=1)]
            # the first window's context is the prefix newline itself, which score() prepends
            windows = [(ctx[1:] if i == 0 else ctx, cont) for i, (ctx, cont) in enumerate(windows)]
            results.append(sum(ll for ll, _ in self.score(windows)))
        return results

    # --- generation -------------------------------------------------------------------------------------------
    @torch.no_grad()
    def _greedy(self, context: list[int], until: list[str], max_new: int) -> str:
        """Greedy bytes on the incremental state until a stop string appears (cut there) or max_new bytes."""
        prompt = ([NEWLINE] + context)[-max(1, self.context - max_new):]
        state = self.model.init_state(1, rounds=self.rounds)
        logits = self.model.decode(torch.tensor([prompt], device=self.torch_device), state)[:, -1]
        stops = [s.encode("utf-8") for s in until if s]  # matched on bytes, like everything the model sees
        new: list[int] = []
        while len(new) < max_new:
            token = int(logits.argmax(-1))
            new.append(token)
            hits = [bytes(new).find(s) for s in stops if s in bytes(new)]
            if hits:
                return bytes(new[:min(hits)]).decode("utf-8", errors="replace")
            if len(new) < max_new:
                logits = self.model.decode(torch.tensor([[token]], device=self.torch_device), state)[:, -1]
        return bytes(new).decode("utf-8", errors="replace")

    def generate_until(self, requests) -> list[str]:
        results = []
        for request in requests:
            context, kwargs = request.args
            kwargs = dict(kwargs or {})
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.get("max_gen_toks", 256))
            max_new = min(max_new, self.context - 1)
            results.append(self._greedy(to_bytes(context), until, max_new))
        return results


def sweep(run: str, tasks: list[str], *, rounds: list[int | None], which: str | None = None, batch_size: int = 8,
          exit_threshold: float | None = None, limit: float | None = None, include_path: str | None = None,
          num_fewshot: int | None = None, default_tasks: bool = True) -> dict:
    """lm-eval `tasks` at every test-time depth in `rounds` (None = as trained), the checkpoint loaded once.
    default_tasks=False looks tasks up in `include_path` only (skips indexing lm-eval's thousands of tasks)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from ..train.pretrained import from_pretrained, resolve

    check_options(batch_size=batch_size, exit_threshold=exit_threshold, limit=limit, num_fewshot=num_fewshot,
                  include_path=include_path)
    checkpoint = resolve(run, which)
    model, config = from_pretrained(checkpoint)
    check_text_model(run, config)
    for r in rounds:  # before lm-eval loads any task: a fixed-depth model or rounds 0 is refused here, not after
        model.resolve_rounds(r)
    if exit_threshold is not None:  # one token through the rule: a model without early exit refuses it itself
        with torch.no_grad():
            token = torch.zeros(1, 1, dtype=torch.long, device=next(model.parameters()).device)
            model.forward_early_exit(token, exit_threshold, rounds=rounds[0])
    manager = TaskManager(include_path=str(Path(include_path)) if include_path else None,
                          include_defaults=default_tasks)
    check_task_names(tasks, manager)
    by_rounds = {}
    for r in rounds:
        lm = HarnessLM(model=model, rounds=r, exit_threshold=exit_threshold, batch_size=batch_size)
        out = lm_eval.simple_evaluate(model=lm, tasks=list(tasks), task_manager=manager, limit=limit,
                                      num_fewshot=num_fewshot, log_samples=False, bootstrap_iters=0)
        by_rounds[str(r if r is not None else "trained")] = _finite(out["results"])
    return {"checkpoint": str(checkpoint), "tasks": list(tasks), "exit_threshold": exit_threshold,
            "limit": limit, "results": by_rounds}


def check_options(*, batch_size: int, exit_threshold: float | None, limit: float | None, num_fewshot: int | None,
                  include_path: str | None) -> None:
    """The numeric and path options, refused in one line before the checkpoint and lm-eval's tasks are loaded (a
    NaN limit or a negative few-shot count would otherwise fail, or hang, deep inside the harness)."""
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    if exit_threshold is not None and not (math.isfinite(exit_threshold) and exit_threshold >= 0):
        raise ValueError(f"--exit-threshold must be a number >= 0, got {exit_threshold}")
    if limit is not None and not (math.isfinite(limit) and limit > 0):
        raise ValueError(f"--limit must be a document count or a fraction > 0, got {limit}")
    if num_fewshot is not None and num_fewshot < 0:
        raise ValueError(f"--num-fewshot must be >= 0, got {num_fewshot}")
    if include_path is not None and not Path(include_path).is_dir():
        raise ValueError(f"--include-path {include_path}: no such folder")


def check_text_model(run: str, config) -> None:
    """lm-eval scores text: a parity or reasoning model would give a bits/byte of bytes it never saw (or fail
    deep inside), so other task kinds are refused in one line."""
    kind = getattr(config.task, "kind", "lm")
    if kind != "lm":
        own = {"sequence": "`looped lengths RUN`", "reasoning": "`looped think RUN --input ...`"}
        raise ValueError(f"{run} was trained on the {getattr(config.task, 'name', kind)} task (task.kind {kind}), "
                         f"not on text; lm-eval scores text models (use {own.get(kind, 'the command of its task')})")


def check_task_names(tasks: list[str], manager) -> None:
    """Unknown task names are a one-line error naming the first (lm-eval raises a KeyError deep inside)."""
    known = set(getattr(manager, "all_tasks", None) or ())
    unknown = [name for name in tasks if known and name not in known]
    if unknown:
        raise ValueError(f"--tasks: unknown lm-eval task {unknown[0]!r} (see lm-eval's task list; "
                         f"--include-path DIR adds your own)")


def _finite(value):
    """lm-eval reports NaN/inf for undefined stderr; JSON cannot hold them."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
