"""Optional checks on the real text samples in ../shared/corpora (skipped where a sample is absent)."""

from pathlib import Path

import pytest

from looped.data import DataConfig, encode_wikitext_rows, load_streams, to_blocks
from looped.experiments import clw

CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


def sample(relative: str) -> Path:
    path = CORPORA / relative
    if not path.is_file():
        pytest.skip(f"real sample {relative} is not present in {CORPORA}")
    return path


@pytest.mark.parametrize("corpus", clw.CORPORA)
def test_cpu_study_samples_split_as_documented(corpus):
    path = sample(Path(clw.CPU_DATA[corpus]["path"]).relative_to("../shared/corpora").as_posix())
    streams = load_streams(DataConfig(**{**clw.CPU_DATA[corpus], "path": str(path)}))
    total = len(streams.train) + len(streams.heldout)
    assert len(streams.heldout) == int(total * clw.CPU_DATA[corpus]["heldout_fraction"])
    assert len(to_blocks(streams.heldout)) == len(streams.heldout) // 513


def test_wikitext_rows_get_one_separator_per_nonempty_row():
    lines = sample("wikitext-2-raw/wiki.test.raw").read_text(encoding="utf-8").split("\n")
    stream = encode_wikitext_rows(line + "\n" for line in lines if line)
    assert int((stream == 256).sum()) == sum(1 for line in lines if line)
    assert int(stream.max()) == 256
