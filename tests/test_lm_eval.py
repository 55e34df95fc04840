"""The lm-evaluation-harness adapter offline, on a tiny local task: the harness's bits/byte equals scoring the same
text directly with the model, contexts start after a newline byte, and generation stops at stop strings."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import tiny_run_config, write_text_corpus

pytest.importorskip("lm_eval", reason="the eval extra is not installed (pip install 'looped[eval]')")

from looped.train.checkpoint import resolve_checkpoint  # noqa: E402
from looped import cli  # noqa: E402
from looped.config import from_dict  # noqa: E402
from looped.integrations.lm_eval import HarnessLM, sweep  # noqa: E402
from looped.train import RunConfig, Trainer, load_model  # noqa: E402

CONTEXT = 64
DOCS = ["The river runs to the sea.", "Seven wizards quietly hex every jolly boxer!",
        "A lazy dog sleeps in the morning light while the fox jumps."]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lmeval")
    corpus = write_text_corpus(folder / "corpus.txt", 20_000)
    config = tiny_run_config(corpus, model={"arch": "anchored_loop", "context_length": CONTEXT, "rounds": 2},
                             data={"block_size": CONTEXT + 1}, train={"max_steps": 4, "eval_every": 4})
    config["model"] = {k: v for k, v in config["model"].items() if k != "layers"}
    Trainer(from_dict(RunConfig, config), folder / "run", progress=False, log=lambda _: None).run()
    return folder / "run"


@pytest.fixture(scope="module")
def tiny_task(tmp_path_factory):
    folder = tmp_path_factory.mktemp("task")
    (folder / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    (folder / "tiny_text.yaml").write_text(f"""task: looped_tiny_text
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder / 'docs.jsonl'}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: bits_per_byte
""")
    return folder


def direct_bits_per_byte(model, docs, rounds):
    """Every byte of each document scored given a newline and the bytes before it: one forward per document."""
    nll, count = 0.0, 0
    for doc in docs:
        tokens = torch.tensor([[10] + list(doc.encode())])
        with torch.no_grad():
            logits = model(tokens[:, :-1], rounds=rounds)
        nll += F.cross_entropy(logits[0].float(), tokens[0, 1:], reduction="sum").item()
        count += len(doc.encode())
    return nll / count / math.log(2)


def test_harness_bits_per_byte_equals_direct_scoring_at_each_depth(run, tiny_task, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    result = sweep(str(run), ["looped_tiny_text"], rounds=[1, 3], include_path=str(tiny_task), batch_size=2,
                   default_tasks=False)  # indexing lm-eval's own task files takes most of a minute here
    model, _ = load_model(resolve_checkpoint(str(run)))
    for r in (1, 3):
        harness = result["results"][str(r)]["looped_tiny_text"]["bits_per_byte,none"]
        assert harness == pytest.approx(direct_bits_per_byte(model, DOCS, r), rel=1e-5)
    # depth is a real argument: one and three rounds score differently
    assert result["results"]["1"]["looped_tiny_text"]["bits_per_byte,none"] != \
        result["results"]["3"]["looped_tiny_text"]["bits_per_byte,none"]


def test_long_documents_and_batches_score_like_one_at_a_time(run):
    lm = HarnessLM(pretrained=str(run), batch_size=3)
    long_doc = " ".join(DOCS * 3)  # > context: rolling windows
    assert len(long_doc) > 2 * CONTEXT

    class Request:
        def __init__(self, *args):
            self.args = args

    batched = lm.loglikelihood([Request(d[:10], d[10:]) for d in DOCS])
    single = HarnessLM(model=lm.model, batch_size=1).loglikelihood([Request(d[:10], d[10:]) for d in DOCS])
    assert [b[0] for b in batched] == pytest.approx([s[0] for s in single], rel=1e-6)
    # early exit at threshold 0 never exits (no distribution moves by less than 0): the full-depth scores
    never_exits = HarnessLM(model=lm.model, exit_threshold=0.0).loglikelihood([Request(d[:10], d[10:]) for d in DOCS])
    assert [e[0] for e in never_exits] == pytest.approx([s[0] for s in single], rel=1e-6)
    pairs = [Request(d[:10], d[10:]) for d in DOCS]
    exits = HarnessLM(model=lm.model, rounds=4, exit_threshold=0.5).loglikelihood(pairs)
    assert [e[0] for e in exits] != pytest.approx([s[0] for s in HarnessLM(model=lm.model, rounds=4).loglikelihood(
        pairs)], rel=1e-6)  # a loose threshold stops positions before round 4
    rolling = lm.loglikelihood_rolling([Request(long_doc)])[0]
    # the first window predicts CONTEXT bytes after the newline; the rest, each with a full context
    first = lm.score([([], list(long_doc.encode()[:CONTEXT]))])[0][0]
    assert rolling < first < 0  # the later windows add their (negative) log-likelihoods


def test_generate_until_cuts_at_the_first_stop_string(run):
    lm = HarnessLM(pretrained=str(run))
    free = lm._greedy(list(b"The river"), [], 40)  # greedy, no stop string
    stop = next(c for c in free[3:] if c.isascii() and c.strip())  # a byte the model does produce

    class Request:
        args = ("The river", {"until": ["<never>", stop], "max_gen_toks": 40})

    (cut,) = lm.generate_until([Request()])
    assert cut == free[:free.index(stop)] and len(cut) < len(free)
