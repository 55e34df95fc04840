"""`looped push` (a checkpoint + model card to the Hub) and `looped lm-eval` (lm-evaluation-harness tasks over
test-time depths): the commands of the optional integrations."""

from __future__ import annotations

from .common import print_json


def cmd_push(args) -> int:
    from ..train.pretrained import push

    print_json(push(args.run, args.repo, which=args.which, private=args.private, revision=args.revision,
                    with_trainer=args.with_trainer, dry_run=args.dry_run))
    return 0


def cmd_lm_eval(args) -> int:
    from ..config import MissingExtra

    try:
        from ..integrations.lm_eval import sweep
    except ImportError as err:  # the eval extra is missing: the CLI's one-line error, not a traceback
        raise MissingExtra(str(err)) from None

    result = sweep(args.run, args.tasks, rounds=args.rounds or [None], which=args.which, batch_size=args.batch_size,
                   exit_threshold=args.exit_threshold, limit=args.limit, include_path=args.include_path,
                   num_fewshot=args.num_fewshot, default_tasks=not args.only_include_path)
    print_json(result, args.out)
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("push", help="upload a checkpoint with a generated model card to the Hugging Face Hub")
    p.add_argument("run", help="run folder or checkpoint folder")
    p.add_argument("repo", metavar="ORG/NAME", help="Hub model repository (created if missing)")
    p.add_argument("--which", choices=["last", "best"], help="checkpoint of a run folder (default: train.select)")
    p.add_argument("--private", action="store_true", help="create the repository private")
    p.add_argument("--revision", help="branch to commit to (default main; created if missing)")
    p.add_argument("--with-trainer", action="store_true",
                   help="also upload the optimizer/RNG/sampler state (lets `looped train --resume` continue it)")
    p.add_argument("--dry-run", metavar="DIR",
                   help="write the files and model card that would be uploaded into DIR (new or empty) for review; "
                        "no network, no token")
    p.set_defaults(func=cmd_push)

    p = sub.add_parser("lm-eval", help="lm-evaluation-harness tasks, one result per test-time depth, as JSON")
    p.add_argument("run", help="run folder, checkpoint folder or hf:ORG/NAME[@REV]")
    p.add_argument("--tasks", nargs="+", required=True, help="lm-eval task names")
    p.add_argument("--rounds", type=int, nargs="+", help="test-time depths of a looped model (default: trained)")
    p.add_argument("--which", choices=["last", "best"])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--exit-threshold", type=float, help="looped rows: early exit (total variation)")
    p.add_argument("--limit", type=float, help="documents per task (a count, or a fraction below 1)")
    p.add_argument("--num-fewshot", type=int)
    p.add_argument("--include-path", help="folder of extra task YAML files (your own tasks)")
    p.add_argument("--only-include-path", action="store_true",
                   help="look tasks up in --include-path only (faster: skips indexing lm-eval's own tasks)")
    p.add_argument("--out", help="also write the JSON here")
    p.set_defaults(func=cmd_lm_eval)
