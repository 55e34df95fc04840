"""Single-process and torchrun (DDP) training with bit-identical resume.

A run folder holds:
    config.yaml                 the resolved configuration
    metrics.jsonl               one JSON line per log / evaluation event
    checkpoints/last/           newest checkpoint (see checkpoint.py)
    checkpoints/best/           lowest held-out loss so far (earliest step on ties)
    tensorboard/                when train.tensorboard is on
"""

from __future__ import annotations

import json
import math
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import yaml
from torch import nn

from ..config import to_dict
from ..eval.progress import progress_bar
from ..io import atomic_write_text
from ..models import build_model
from ..models.compile import compile_model
from . import checkpoint as ckpt
from .config import RunConfig
from .distributed import Dist, all_mean, barrier, init_distributed, shutdown
from .tasks import make_task
from .schedule import learning_rate


class TrainingError(RuntimeError):
    """Training cannot go on (non-finite loss, resume mismatch ...); the message says why."""


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices of linear layers only; embeddings, biases, norm gains, scalars and
    per-channel vectors (LayerScale, gates, slot keys) are not decayed."""
    embedding_params = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and id(p) not in embedding_params else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def first_difference(a, b, prefix: str = "") -> str | None:
    """Dotted key of the first difference between two nested dicts (for resume checks)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            found = first_difference(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else key)
            if found:
                return found
        return None
    return None if a == b else f"{prefix} ({a!r} in the checkpoint, {b!r} now)"


class Trainer:
    def __init__(self, config: RunConfig, out_dir: str | Path, *, resume: bool = False, progress: bool = True,
                 log=print):
        self.config, self.out_dir, self.progress = config, Path(out_dir), progress
        self.dist: Dist = init_distributed(config.train.device)
        self._log = log
        self.resume = resume
        tc = config.train
        if tc.threads:
            torch.set_num_threads(tc.threads)
        per_rank, rem = divmod(tc.batch_size, self.dist.world)
        if rem:
            raise TrainingError(f"train.batch_size {tc.batch_size} is not divisible by {self.dist.world} processes")
        self.micro = tc.micro_batch_size or per_rank
        if per_rank % self.micro:
            raise TrainingError(f"train.micro_batch_size {self.micro} does not divide the {per_rank} sequences "
                                f"each of {self.dist.world} process(es) gets per update")
        self.accumulation = per_rank // self.micro
        self.per_rank = per_rank

    def log(self, message: str) -> None:
        if self.dist.main:
            self._log(message)

    # --- set-up ----------------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg, tc = self.config, self.config.train
        last = self.out_dir / "checkpoints" / "last"
        if not self.resume and ckpt.is_checkpoint(last):
            raise TrainingError(f"{self.out_dir} already holds a run (pass --resume to continue it, or choose "
                                f"another output folder)")
        if self.resume and not ckpt.is_checkpoint(last):
            raise TrainingError(f"--resume: no checkpoint to resume in {last}")
        torch.manual_seed(tc.seed)
        self.model = build_model(cfg.model).to(self.dist.device)
        if tc.compile:  # in place, on the regions the model declares: checkpoints and DDP see the same module
            compile_model(self.model)
        self.task = make_task(cfg, log=self.log)
        self.targets_per_update = tc.batch_size * self.task.targets_per_sequence
        self.total_steps = tc.max_steps or math.ceil(tc.max_targets / self.targets_per_update)
        self.optimizer = torch.optim.AdamW(param_groups(self.model, cfg.optim.weight_decay), lr=cfg.optim.lr,
                                           betas=tuple(cfg.optim.betas), eps=cfg.optim.eps)
        self.step, self.best_loss, self.best_step = 0, math.inf, -1
        if self.resume:
            self._restore(last)
        self.ddp_model = self.model
        if self.dist.enabled:
            self.ddp_model = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.dist.local_rank] if self.dist.device.type == "cuda" else None)
        if self.dist.main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.out_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
        self.writer = self._tensorboard() if tc.tensorboard and self.dist.main else None

    def _tensorboard(self):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise TrainingError("train.tensorboard: the tensorboard package is not installed "
                                "(pip install 'looped[tensorboard]')") from None
        return SummaryWriter(str(self.out_dir / "tensorboard"))

    def _restore(self, folder: Path) -> None:
        saved = ckpt.read_config(folder)
        diff = first_difference(to_dict(saved), to_dict(self.config))
        if diff:
            raise TrainingError(f"--resume: the config disagrees with the checkpoint at {diff}")
        ckpt.load_weights(self.model, folder)
        tensors = ckpt.read_tensors(folder / "trainer.safetensors")
        try:
            meta = json.loads((folder / "trainer.json").read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ckpt.CheckpointError(f"{folder / 'trainer.json'}: unreadable ({err})") from None
        if meta.get("world") not in (None, self.dist.world) and self.config.data.sampler == "historical":
            self.log(f"resuming a {meta['world']}-process run with {self.dist.world} process(es)")
        ckpt.restore_optimizer(self.optimizer, {k: v.to(self.dist.device) for k, v in tensors.items()}, meta["optim"])
        ckpt.restore_rng(tensors, meta["rng"])
        self.task.load_state_dict({**{k[len("task."):]: v for k, v in tensors.items()
                                      if k.startswith("task.")}, **meta["task"]})
        self.step, self.best_loss, self.best_step = meta["step"], meta["best_loss"], meta["best_step"]
        self._truncate_metrics(self.step)
        self.log(f"resumed {self.out_dir} at update {self.step}/{self.total_steps}")

    def _truncate_metrics(self, step: int) -> None:
        path = self.out_dir / "metrics.jsonl"
        if self.dist.main and path.exists():
            kept = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
            atomic_write_text(path, "".join(line + "\n" for line in kept))

    # --- the loop ---------------------------------------------------------------------------------------
    def run(self, stop_after: int | None = None) -> dict:
        """Train to the budget (or stop after `stop_after` updates in total, as if killed); return summary."""
        self._setup()
        tc = self.config.train
        end = self.total_steps if stop_after is None else min(self.total_steps, stop_after)
        self.log(f"training {self.config.model.arch} ({self.model.parameter_counts()['total']:,} parameters) on "
                 f"{self.task.description}; {self.total_steps} updates x {tc.batch_size} sequences "
                 f"({self.dist.world} process(es), {self.accumulation} accumulation step(s))")
        bar = progress_bar(total=self.total_steps, initial=self.step, disable=not (self.progress and self.dist.main),
                           unit="upd", desc="train")
        last_eval = None
        try:
            window_start, window_targets = time.perf_counter(), 0
            while self.step < end:
                loss, grad_norm = self._update()
                self.step += 1
                window_targets += self.targets_per_update
                if self.step % tc.log_every == 0 or self.step == end:
                    elapsed = time.perf_counter() - window_start
                    tps = window_targets / max(elapsed, 1e-9)
                    self._record({"step": self.step, "loss": loss, "lr": self.optimizer.param_groups[0]["lr"],
                                  "grad_norm": grad_norm, "targets": self.step * self.targets_per_update,
                                  "tokens_per_s": tps})
                    bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tps:,.0f}")
                    window_start, window_targets = time.perf_counter(), 0
                bar.update(1)
                final = self.step == self.total_steps
                if (tc.eval_every and self.step % tc.eval_every == 0) or final:
                    last_eval = self._evaluate()
                if final or self.step == end or (tc.eval_every and self.step % tc.eval_every == 0) or (
                        tc.checkpoint_every and self.step % tc.checkpoint_every == 0):
                    self._save("last")
        finally:
            bar.close()
            if self.writer is not None:
                self.writer.close()
        shutdown(self.dist)
        return {"step": self.step, "total_steps": self.total_steps, "eval": last_eval,
                "best_step": self.best_step, "best_loss": self.best_loss}

    def _update(self) -> tuple[float, float]:
        cfg = self.config
        lr = learning_rate(self.step, lr=cfg.optim.lr, total_steps=self.total_steps,
                           warmup_steps=cfg.optim.warmup_steps, schedule=cfg.optim.schedule, min_lr=cfg.optim.min_lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        task = self.task
        batch = task.global_batch(cfg.train.batch_size)  # identical on every rank
        mine = task.shard(batch, self.dist.rank * self.per_rank, (self.dist.rank + 1) * self.per_rank)  # disjoint
        device = self.dist.device
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.train.precision == "bf16")
        total = torch.zeros((), device=device)
        for micro in range(self.accumulation):
            micro_batch = task.to(task.shard(mine, micro * self.micro, (micro + 1) * self.micro), device)
            sync = micro == self.accumulation - 1
            with (nullcontext() if sync or not self.dist.enabled else self.ddp_model.no_sync()):
                with autocast:
                    loss = task.loss(self.ddp_model, micro_batch) / self.accumulation
                loss.backward()
            total += loss.detach()
        loss_value = all_mean(total, self.dist).item()
        if not math.isfinite(loss_value):
            self.optimizer.zero_grad(set_to_none=True)
            last = self.out_dir / "checkpoints" / "last"
            kept = f"the last good checkpoint is {last}" if ckpt.is_checkpoint(last) else "no checkpoint was written"
            raise TrainingError(f"loss became {loss_value} at update {self.step + 1}; stopping ({kept})")
        clip = cfg.optim.grad_clip or math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip).item()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_value, grad_norm

    def _evaluate(self) -> dict | None:
        result = None
        if self.dist.main:
            tc = self.config.train
            dtype = torch.bfloat16 if tc.precision == "bf16" else None
            result = self.task.evaluate(self.model, batch_size=tc.eval_batch_size, max_batches=tc.eval_batches,
                                        device=self.dist.device, autocast_dtype=dtype)
            self._record({"step": self.step, **{f"val_{k}": v for k, v in result.items()
                                                 if isinstance(v, (int, float)) and not isinstance(v, bool)}})
            if result["loss"] < self.best_loss:  # strict: ties keep the earliest step
                self.best_loss, self.best_step = result["loss"], self.step
                self._write_checkpoint("best")
        barrier(self.dist)
        return result

    def _record(self, event: dict) -> None:
        if not self.dist.main:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.out_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(event) + "\n")
        if self.writer is not None:
            for key, value in event.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.writer.add_scalar(key, value, event["step"])

    def _save(self, which: str) -> None:
        """Every rank calls this; rank 0 writes, the others wait for the write to finish."""
        if self.dist.main:
            self._write_checkpoint(which)
        barrier(self.dist)

    def _write_checkpoint(self, which: str) -> None:
        optim_tensors, optim_meta = ckpt.optimizer_tensors(self.optimizer)
        rng_tensors, rng_meta = ckpt.rng_tensors()
        task_state = self.task.state_dict()
        task_tensors = {f"task.{k}": v for k, v in task_state.items() if isinstance(v, torch.Tensor)}
        task_meta = {k: v for k, v in task_state.items() if not isinstance(v, torch.Tensor)}
        meta = {"step": self.step, "total_steps": self.total_steps, "targets": self.step * self.targets_per_update,
                "best_loss": self.best_loss, "best_step": self.best_step, "world": self.dist.world,
                "optim": optim_meta, "rng": rng_meta, "task": task_meta}
        ckpt.write_folder_atomically(self.out_dir / "checkpoints" / which, {
            "config.json": ckpt.config_json(self.config),
            "model.safetensors": ckpt.model_file(self.model),
            "trainer.safetensors": {**optim_tensors, **rng_tensors, **task_tensors},
            "trainer.json": json.dumps(meta),
        })
