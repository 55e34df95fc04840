"""Run under torchrun by test_fsdp.py: train every config of a JSON file {name: run config} in turn inside one
process group (one launch for all rows), each into OUT/<name> (a name ending in _split stops after 2 updates and
resumes), with rank 0's share of the parameters in
OUT/<name>/sharding.json."""

import json
import sys
from pathlib import Path

import looped.train.trainer as trainer_module
from looped.config import from_dict
from looped.train import RunConfig, Trainer

if __name__ == "__main__":
    configs, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    shutdown = trainer_module.shutdown
    trainer_module.shutdown = lambda d: None  # keep the process group for the next row
    for name, config in configs.items():
        config = from_dict(RunConfig, config)
        if name.endswith("_split"):  # killed after 2 updates, then resumed under FSDP
            Trainer(config, out / name, progress=False, log=lambda _: None).run(stop_after=2)
        trainer = Trainer(config, out / name, resume=name.endswith("_split"), progress=False, log=lambda _: None)
        trainer.run()
        if trainer.dist.main:  # evidence that the parameters really were sharded
            local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel()
                        for p in trainer.model.parameters())
            total = sum(p.numel() for p in trainer.model.parameters())
            (out / name / "sharding.json").write_text(json.dumps({"local": local, "total": total}))
    shutdown(trainer.dist)
