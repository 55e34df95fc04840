"""Single-process and torchrun (DDP) training with bit-identical resume.

A run folder holds:
    config.yaml                 the resolved configuration
    metrics.jsonl               one JSON line per log / evaluation event
    checkpoints/last/           newest checkpoint (see checkpoint.py)
    checkpoints/best/           lowest held-out loss so far (earliest step on ties)
    tensorboard/                when train.tensorboard is on
    .run.lock                   held by the training process (see run_folder.py)

Safety: a start without --resume refuses a folder that holds a run; one trainer per folder (lock); Ctrl-C /
SIGTERM checkpoints the current update, then stops (a second one aborts at once); a non-finite loss, gradient
or validation loss stops the run before it can reach a checkpoint; `last` is written before the final
evaluation, so a kill during it loses nothing (resume runs the evaluation).
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import threading
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
from .compute import budget_steps, update_flops
from .config import RunConfig
from .distributed import Dist, all_mean, any_rank, barrier, init_distributed, shutdown
from .run_folder import RunLock, existing_run, read_metrics
from .tasks import make_train_task
from .tracking import WandbSink
from .schedule import learning_rate
from .validation_line import task_chance, validation_line


class TrainingError(RuntimeError):
    """Training cannot go on (non-finite loss, resume mismatch ...); the message says why."""


class TrainingInterrupted(TrainingError):
    """Ctrl-C / SIGTERM: the current update was checkpointed; the message says how to resume."""

    exit_code = 130


# Keys --resume may change: they do not change the updates done so far (budget, logging, evaluation and
# checkpoint cadence, threads, default checkpoint selection). Anything else would silently mix two runs.
RESUMABLE_KEYS = frozenset(f"train.{k}" for k in (
    "max_steps", "max_targets", "max_flops", "log_every", "eval_every", "eval_batches", "eval_batch_size",
    "checkpoint_every", "threads", "tensorboard", "select",
    # how a run is spread over processes and where it is logged do not change what it computes: a DDP or FSDP
    # checkpoint resumes in one process, W&B can be turned on later
    "parallel", "wandb"))


def new_run_id() -> str:
    """Names one run for its whole life (kept in every checkpoint's trainer.json, carried by --resume and by a
    push --with-trainer): how `looped train hf:ORG/NAME --resume` tells its own run from an unrelated one."""
    import secrets

    return secrets.token_hex(8)


def local_tensor(p: torch.Tensor) -> torch.Tensor:
    """This rank's shard of an FSDP2 (DTensor) parameter, the parameter itself otherwise."""
    return p.to_local() if hasattr(p, "to_local") else p


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices of linear layers only; embeddings, biases, norm gains, scalars and
    per-channel vectors (LayerScale, gates, slot keys) are not decayed, nor a matrix its model marks
    `no_weight_decay = True` (stable_loop's identity-initialised B and C, as its paper's release)."""
    embedding_params = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        decayed = p.dim() >= 2 and id(p) not in embedding_params and not getattr(p, "no_weight_decay", False)
        (decay if decayed else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def first_difference(a, b, prefix: str = "", ignore=frozenset()) -> str | None:
    """Dotted key of the first difference between two nested dicts, skipping keys in `ignore` (resume checks)."""
    if prefix in ignore:
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            found = first_difference(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else key, ignore)
            if found:
                return found
        return None
    return None if a == b else f"{prefix} ({a!r} in the checkpoint, {b!r} now)"


class StopSignals:
    """While active, the first SIGINT/SIGTERM only raises a flag (the trainer checkpoints at the current update
    and stops); a second one aborts at once (KeyboardInterrupt). Signals can only be caught on the main
    thread; elsewhere this does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.received: str | None = None
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._first) for sig in self.SIGNALS}
        return self

    def _first(self, signum, frame) -> None:
        self.received = signal.Signals(signum).name
        for sig in self.SIGNALS:
            signal.signal(sig, self._second)

    @staticmethod
    def _second(signum, frame) -> None:
        raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class Trainer:
    def __init__(self, config: RunConfig, out_dir: str | Path, *, resume: bool | str = False, progress: bool = True,
                 log=print, resume_command: str | None = None):
        """resume: False = a new run (refused where one exists), True = continue the run in out_dir,
        "auto" = continue it when it has a checkpoint, else start it (study runners).
        resume_command: what the Ctrl-C message tells the user to run (a command that trains inside a bigger
        one, e.g. `looped quickstart`, names itself: `looped train --resume` would skip what comes after)."""
        self.config, self.out_dir, self.progress = config, Path(out_dir), progress
        self.resume_command = resume_command or f"looped train --out {self.out_dir} --resume"
        self.dist: Dist = init_distributed(config.train.device)
        self._log = log
        self.resume = resume
        self.checkpoints = self.out_dir / "checkpoints"
        self.lock: RunLock | None = None
        self._fresh_start: bool | None = None  # set under the lock: this process starts the run (see _undo_start)
        self._made_folder = False
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
        self.fsdp = tc.parallel == "fsdp" and self.dist.enabled  # one process: plain training either way

    def log(self, message: str) -> None:
        if self.dist.main:
            self._log(message)

    # --- set-up ----------------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg, tc = self.config, self.config.train
        last = self.checkpoints / "last"
        if self.dist.main:
            self._claim_folder()
        barrier(self.dist)  # the other ranks read `last` only once rank 0 has recovered it
        if self.resume == "auto":
            self.resume = ckpt.find_checkpoint(last) is not None
        if self.resume and ckpt.find_checkpoint(last) is None:
            raise TrainingError(f"--resume: no checkpoint to resume in {last} (if the run stopped before its first "
                                f"checkpoint, delete {self.out_dir} or choose another --out)")
        torch.manual_seed(tc.seed)
        self.model = build_model(cfg.model).to(self.dist.device)
        if tc.init_from and not self.resume:  # a resume takes every weight from its own checkpoint
            self._init_from(tc.init_from)
        if tc.exit_gate_stage == 2:  # before the optimizer: it must see the gate's parameters only
            from ..models.exit_gate import GateTarget

            self.model.train_gate_only(GateTarget(tc.exit_gate_slope, tc.exit_gate_margin))
        if tc.compile:  # in place, on the regions the model declares: checkpoints and DDP see the same module
            compile_model(self.model)
        self.task = make_train_task(cfg, log=self.log)
        self.targets_per_update = tc.batch_size * self.task.targets_per_sequence
        self.update_flops = update_flops(self.model, cfg, self.task,  # None: not fixed (non-LM tasks)
                                         calls=self.dist.world * self.accumulation)
        self.total_steps = budget_steps(tc, self.targets_per_update, self.update_flops)
        if self.fsdp:  # shard before the optimizer sees the parameters; resumed weights are loaded unsharded
            from .fsdp import shard

            if self.resume:
                ckpt.load_weights(self.model, last)
            shard(self.model, self.dist.device, tc.precision)
        self.optimizer = torch.optim.AdamW(param_groups(self.model, cfg.optim.weight_decay), lr=cfg.optim.lr,
                                           betas=tuple(cfg.optim.betas), eps=cfg.optim.eps)
        self.step, self.best_loss, self.best_step = 0, math.inf, -1
        self.evaluated_step = self.saved_step = -1
        self.seconds_before = 0.0  # wall time of earlier processes of this run (a resume continues the clock)
        self.clock_start = time.perf_counter()
        self.run_id = new_run_id()  # a resume takes the checkpoint's
        if self.resume:
            self._restore(last)
        self.ddp_model = self.model
        if self.dist.enabled and not self.fsdp:
            self.ddp_model = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.dist.local_rank] if self.dist.device.type == "cuda" else None)
        if self.dist.main:
            atomic_write_text(self.out_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
        self.writer = self._tensorboard() if tc.tensorboard and self.dist.main else None
        self.tracker = WandbSink(tc.wandb, self.out_dir, to_dict(cfg), self.resume) \
            if tc.wandb and self.dist.main else None

    def _claim_folder(self) -> None:
        """Rank 0: refuse a folder holding another run (touching nothing), lock it, and on --resume put the
        newest complete checkpoint back in place after a kill mid-write."""
        def refuse_existing_run() -> None:
            what = existing_run(self.out_dir) if self.resume is False else None
            if what:
                raise TrainingError(f"{self.out_dir} already holds a run ({what}); pass --resume to continue it, "
                                    f"or choose another --out")

        refuse_existing_run()
        self._made_folder = not self.out_dir.exists()
        self.lock = RunLock.acquire(self.out_dir)
        refuse_existing_run()  # again under the lock: another trainer may have started meanwhile
        self._fresh_start = self.resume is False or (
            self.resume == "auto" and ckpt.find_checkpoint(self.checkpoints / "last") is None)
        if self.resume is not False:
            for which in ("last", "best"):
                ckpt.recover_checkpoint(self.checkpoints / which)
        metrics = self.out_dir / "metrics.jsonl"
        if self.resume == "auto" and ckpt.find_checkpoint(self.checkpoints / "last") is None and metrics.exists():
            self.log(f"{self.out_dir}: the run stopped before its first checkpoint; starting it again")
            metrics.unlink()

    def _tensorboard(self):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise TrainingError("train.tensorboard: the tensorboard package is not installed "
                                "(pip install 'looped[tensorboard]')") from None
        return SummaryWriter(str(self.out_dir / "tensorboard"))

    def _init_from(self, source: str) -> None:
        """Load another run's weights (fine-tuning); its model section must equal this run's, key for key."""
        folder = ckpt.resolve_checkpoint(source, note=self.log)
        theirs, ours = to_dict(ckpt.read_config(folder).model), to_dict(self.config.model)
        differing = [f"model.{key} ({theirs.get(key)!r} there, {ours.get(key)!r} here)"
                     for key in list(ours) + [k for k in theirs if k not in ours] if theirs.get(key) != ours.get(key)]
        if differing:
            raise TrainingError(f"train.init_from: {source} has another architecture: {'; '.join(differing)}")
        ckpt.load_weights(self.model, folder)
        step = ckpt.checkpoint_step(folder)
        self.log(f"initialised the weights from {folder}" + (f" (update {step} of that run)" if step >= 0 else ""))

    def _restore(self, folder: Path) -> None:
        saved = ckpt.read_config(folder)
        diff = first_difference(to_dict(saved), to_dict(self.config), ignore=RESUMABLE_KEYS)
        if diff:
            raise TrainingError(f"--resume: the config disagrees with the checkpoint at {diff}; only "
                                f"{', '.join(sorted(RESUMABLE_KEYS))} may change")
        if not self.fsdp:
            ckpt.load_weights(self.model, folder)
        tensors = ckpt.read_tensors(folder / "trainer.safetensors")
        try:
            meta = json.loads((folder / "trainer.json").read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ckpt.CheckpointError(f"{folder / 'trainer.json'}: unreadable ({err})") from None
        if meta["step"] > self.total_steps:
            raise TrainingError(f"--resume: the run is at update {meta['step']}, past the budget of "
                                f"{self.total_steps} updates; raise train.max_steps / train.max_targets / "
                                "train.max_flops")
        if meta.get("world") not in (None, self.dist.world) and self.config.data.sampler == "historical":
            self.log(f"resuming a {meta['world']}-process run with {self.dist.world} process(es)")
        optim_tensors = {k: v.to(self.dist.device) for k, v in tensors.items()}
        if self.fsdp:
            from .fsdp import load_full_optimizer_state

            load_full_optimizer_state(self.optimizer, ckpt.optimizer_state(self.optimizer, optim_tensors,
                                                                           meta["optim"]))
        else:
            ckpt.restore_optimizer(self.optimizer, optim_tensors, meta["optim"])
        ckpt.restore_rng(tensors, meta["rng"])
        self.task.load_state_dict({**{k[len("task."):]: v for k, v in tensors.items()
                                      if k.startswith("task.")}, **meta["task"]})
        self.step, self.best_loss, self.best_step = meta["step"], meta["best_loss"], meta["best_step"]
        self.run_id = meta.get("run_id") or self.run_id  # runs from before run ids get one now
        # checkpoints from before this field were written after their evaluation
        self.evaluated_step = meta.get("evaluated_step", meta["step"])
        self.seconds_before = float(meta.get("train_seconds", 0.0))  # runs from before the field start at 0
        self.saved_step = self.step
        self._truncate_metrics(self.step)
        self.log(f"resumed {self.out_dir} at update {self.step}/{self.total_steps}")

    def _truncate_metrics(self, step: int) -> None:
        """Drop events after the checkpoint (they will be logged again) and a torn last line."""
        path = self.out_dir / "metrics.jsonl"
        if self.dist.main and path.exists():
            kept = [e for e in read_metrics(path, warn=self.log) if e["step"] <= step]
            atomic_write_text(path, "".join(json.dumps(e) + "\n" for e in kept))

    # --- the loop ---------------------------------------------------------------------------------------
    def run(self, stop_after: int | None = None) -> dict:
        """Train to the budget (or stop after `stop_after` updates in total, as if killed); return summary."""
        try:
            with StopSignals() as signals:
                return self._run(stop_after, signals)
        except BaseException:
            self._undo_start()
            raise
        finally:
            if self.lock is not None:
                self.lock.release()

    # What a start writes before its first update (run_folder.LOCK_NAME last: it is removed while still held).
    START_FILES = ("config.yaml", "metrics.jsonl", "wandb_run_id", "wandb", "tensorboard", "checkpoints")

    def _undo_start(self) -> None:
        """A new run that fails before its first update (a W&B start-up error, a bad task option, a NaN at
        update 1 ...) removes what it wrote, so the corrected retry is not refused as "already holds a run" and
        no lock file is left; a folder it created goes too. Runs that trained, and resumed runs, stay as they are."""
        if not self._fresh_start or getattr(self, "step", 0) > 0 or \
                ckpt.find_checkpoint(self.checkpoints / "last") is not None:
            return
        for name in self.START_FILES:
            path = self.out_dir / name
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                path.unlink()
        if self.lock is not None:
            self.lock.path.unlink(missing_ok=True)
        if self._made_folder:
            try:
                self.out_dir.rmdir()  # only if empty: never a file this process did not write
            except OSError:
                pass

    def _run(self, stop_after: int | None, signals: StopSignals) -> dict:
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
                if any_rank(signals.received is not None, self.dist):
                    self._stop_on_signal(signals.received or "a signal on another rank")
                loss, grad_norm = self._update()
                self.step += 1
                window_targets += self.targets_per_update
                if self.step % tc.log_every == 0 or self.step == end:
                    elapsed = time.perf_counter() - window_start
                    tps = window_targets / max(elapsed, 1e-9)
                    self._record({"step": self.step, "loss": loss, "lr": self.optimizer.param_groups[0]["lr"],
                                  "grad_norm": grad_norm, "targets": self.step * self.targets_per_update,
                                  "tokens_per_s": tps, "seconds": round(self._seconds(), 3),
                                  **self._flops_so_far()})
                    bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tps:,.0f}")
                    window_start, window_targets = time.perf_counter(), 0
                bar.update(1)
                periodic_eval = bool(tc.eval_every) and self.step % tc.eval_every == 0
                if periodic_eval and self.step != self.total_steps:  # the final one runs after the loop
                    last_eval = self._evaluate()
                if self.step == end or periodic_eval or (tc.checkpoint_every and self.step % tc.checkpoint_every == 0):
                    self._save("last")
            if self.step == self.total_steps and self.evaluated_step != self.step:
                # `last` already holds this update: a kill during the final evaluation loses nothing
                last_eval = self._evaluate()
                self._save("last")
        finally:
            bar.close()
            if self.writer is not None:
                self.writer.close()
            if self.tracker is not None:
                self.tracker.close()
        shutdown(self.dist)
        return {"step": self.step, "total_steps": self.total_steps, "eval": last_eval,
                "best_step": self.best_step, "best_loss": self.best_loss}

    def _seconds(self) -> float:
        """Wall time this run has trained (evaluations and checkpoints included), over every process of it."""
        return self.seconds_before + time.perf_counter() - self.clock_start

    def _flops_so_far(self) -> dict:
        """Cumulative training FLOPs (the compute ledger) for a metrics line; nothing where they are not fixed."""
        return {} if self.update_flops is None else {"flops": self.update_flops.until(self.step)}

    def _stop_on_signal(self, name: str) -> None:
        if self.saved_step != self.step:
            self._save("last")
        raise TrainingInterrupted(f"stopped by {name} at update {self.step}/{self.total_steps}, checkpoint saved; "
                                  f"continue with: {self.resume_command}")

    def _update(self) -> tuple[float, float]:
        cfg = self.config
        lr = learning_rate(self.step, lr=cfg.optim.lr, total_steps=self.total_steps,
                           warmup_steps=cfg.optim.warmup_steps, schedule=cfg.optim.schedule, min_lr=cfg.optim.min_lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        task = self.task
        self.model.training_update = self.step  # what a depth schedule that changes over training reads
        batch = task.global_batch(cfg.train.batch_size)  # identical on every rank
        mine = task.shard(batch, self.dist.rank * self.per_rank, (self.dist.rank + 1) * self.per_rank)  # disjoint
        device = self.dist.device
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.train.precision == "bf16")
        total = torch.zeros((), device=device)
        for micro in range(self.accumulation):
            micro_batch = task.to(task.shard(mine, micro * self.micro, (micro + 1) * self.micro), device)
            sync = micro == self.accumulation - 1
            # FSDP reduce-scatters every micro-batch into the sharded gradients (DDP defers to the last one)
            with (nullcontext() if sync or not self.dist.enabled or self.fsdp else self.ddp_model.no_sync()):
                with autocast:
                    loss = task.loss(self.ddp_model, micro_batch) / self.accumulation
                loss.backward()
            total += loss.detach()
        loss_value = all_mean(total, self.dist).item()
        if not math.isfinite(loss_value):
            self._stop_non_finite(f"loss became {loss_value}")
        clip = cfg.optim.grad_clip or math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        grad_norm = (grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm).item()
        if not math.isfinite(grad_norm):  # checked before the step: the weights stay as they were
            self._stop_non_finite(f"gradient norm became {grad_norm}")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_value, grad_norm

    def _stop_non_finite(self, what: str, update: int | None = None) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        update = self.step + 1 if update is None else update
        advice = "lower optim.lr" if self.config.optim.grad_clip else "lower optim.lr or set optim.grad_clip"
        raise TrainingError(f"{what} at update {update}; stopping ({self._good_checkpoints()}; {advice})")

    def _good_checkpoints(self) -> str:
        """Which saved checkpoints predate the failure. Whatever went non-finite (the loss or gradient of the
        next update, the validation loss, a weight) was computed from the weights after update `self.step`, so a
        checkpoint of that update holds those weights and is not good (after optim.lr=1e6 they are 1e6-scale);
        one of an earlier update is."""
        found = {which: ckpt.find_checkpoint(self.checkpoints / which) for which in ("last", "best")}
        steps = {which: ckpt.checkpoint_step(folder) for which, folder in found.items() if folder is not None}
        good = [which for which, step in steps.items() if step < self.step]
        if not steps:
            return "no checkpoint was written"
        if good:
            which = "last" if "last" in good else "best"
            earlier = f"the last good checkpoint is {found[which]} (update {steps[which]})"
        else:
            earlier = "no checkpoint of an earlier update is kept"
        if "last" in good or "last" not in steps:
            return earlier
        return (f"{found['last']} holds the weights of update {steps['last']} that gave this, so it is not a good "
                f"checkpoint; {earlier}")

    def _evaluate(self) -> dict | None:
        result = None
        self.evaluated_step = self.step
        if self.dist.main or self.fsdp:  # a sharded model's forward is a collective: every rank evaluates
            tc = self.config.train
            dtype = torch.bfloat16 if tc.precision == "bf16" else None
            result = self.task.evaluate(self.model, batch_size=tc.eval_batch_size, max_batches=tc.eval_batches,
                                        device=self.dist.device, autocast_dtype=dtype)
            if not math.isfinite(result["loss"]):  # nothing of this state reaches a checkpoint
                self._stop_non_finite(f"validation loss became {result['loss']}", self.step)
            self._record({"step": self.step, **{f"val_{k}": v for k, v in result.items()
                                                 if isinstance(v, (int, float)) and not isinstance(v, bool)}})
            if self.progress:
                self.log(validation_line(self.step, result, task_chance(self.task)))
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
        if self.tracker is not None:
            self.tracker.log(event)
        if self.writer is not None:
            for key, value in event.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.writer.add_scalar(key, value, event["step"])

    def _save(self, which: str) -> None:
        """Every rank calls this; rank 0 writes (FSDP: after every rank helped gather), the others wait."""
        if self.dist.main or self.fsdp:
            self._write_checkpoint(which)
        barrier(self.dist)
        if which == "last":  # on every rank: each decides from it whether a checkpoint is still due (collectives)
            self.saved_step = self.step

    def _write_checkpoint(self, which: str) -> None:
        if not all(torch.isfinite(local_tensor(p)).all() for p in self.model.parameters()):
            self._stop_non_finite("a weight became non-finite", self.step)
        if self.fsdp:  # gather the shards on every rank (collectives), then only rank 0 writes
            from .fsdp import full_model_state, full_optimizer_state

            model_file = (full_model_state(self.model), ckpt.model_file(self.model)[1])
            optim_tensors, optim_meta = ckpt.optimizer_tensors(self.optimizer, full_optimizer_state(self.optimizer))
            if not self.dist.main:
                return
        else:
            model_file = ckpt.model_file(self.model)
            optim_tensors, optim_meta = ckpt.optimizer_tensors(self.optimizer)
        rng_tensors, rng_meta = ckpt.rng_tensors()
        task_state = self.task.state_dict()
        task_tensors = {f"task.{k}": v for k, v in task_state.items() if isinstance(v, torch.Tensor)}
        task_meta = {k: v for k, v in task_state.items() if not isinstance(v, torch.Tensor)}
        meta = {"step": self.step, "total_steps": self.total_steps, "targets": self.step * self.targets_per_update,
                "best_loss": self.best_loss, "best_step": self.best_step, "world": self.dist.world,
                "evaluated_step": self.evaluated_step, "run_id": self.run_id, "train_seconds": self._seconds(),
                "optim": optim_meta, "rng": rng_meta, "task": task_meta}
        ckpt.write_folder_atomically(self.checkpoints / which, {
            "config.json": ckpt.config_json(self.config),
            "model.safetensors": model_file,
            "trainer.safetensors": {**optim_tensors, **rng_tensors, **task_tensors},
            "trainer.json": json.dumps(meta),
        })
