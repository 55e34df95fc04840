"""Optional Weights & Biases sink (`pip install 'looped[wandb]'`, `train.wandb: {project: ...}`), beside
metrics.jsonl and TensorBoard.

The W&B run id is stored in the run folder (`wandb_run_id`), so `looped train ... --resume` continues the same W&B
run rather than starting a new one. Every event is logged with its update number as the x axis (`step`), so the
events a resumed run repeats after its checkpoint do not trip W&B's monotonic step counter. WANDB_MODE=offline
(or `wandb offline`) keeps everything under <run>/wandb/ for a later `wandb sync`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from ..io import atomic_write_text

ID_FILE = "wandb_run_id"


@dataclass
class WandbConfig:
    project: str = "looped"  # W&B project the run is logged to
    entity: str | None = None  # W&B user or team; None = the default of the logged-in account
    name: str | None = None  # display name; None = the run folder's name


class TrackingError(RuntimeError):
    """The tracker cannot start; the message says why."""


class WandbSink:
    def __init__(self, cfg: WandbConfig, out_dir: Path, config: dict, resume: bool):
        try:
            import wandb
        except ImportError:
            raise TrackingError("train.wandb: the wandb package is not installed (pip install 'looped[wandb]')") \
                from None
        id_path = Path(out_dir) / ID_FILE
        run_id = id_path.read_text().strip() if resume and id_path.is_file() else secrets.token_hex(4)
        atomic_write_text(id_path, run_id + "\n")  # before init: a run killed during start-up resumes it too
        try:
            self.run = wandb.init(project=cfg.project, entity=cfg.entity, name=cfg.name or Path(out_dir).name,
                                  id=run_id, resume="allow", dir=str(out_dir), config=config)
        except wandb.errors.Error as err:  # no API key, offline, no such entity ...: W&B's own errors
            why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise TrackingError(f"train.wandb: W&B cannot start ({why}); log in with `wandb login` or set "
                                f"WANDB_API_KEY (WANDB_MODE=offline logs locally)") from None
        self.run.define_metric("*", step_metric="step")
        self.id = run_id

    def log(self, event: dict) -> None:
        self.run.log({k: v for k, v in event.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})

    def close(self) -> None:
        self.run.finish()
