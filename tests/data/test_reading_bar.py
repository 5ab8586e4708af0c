"""The corpus-reading bar leaves nothing on screen, also when max_bytes cuts the read short."""

from aah.data.config import DataConfig
from aah.data.corpora import read_corpus


def test_a_read_cut_short_leaves_no_stale_bar(tmp_path, capsys):
    for i in range(20):
        (tmp_path / f"{i:02d}.txt").write_text("x" * 100)
    corpus = read_corpus(DataConfig(path=str(tmp_path), max_bytes=350), progress=True)
    assert sum(len(d.data) for d in corpus.documents) == 350
    err = capsys.readouterr().err
    assert "reading" in err  # the bar was shown...
    assert err.split("\r")[-1].strip() == ""  # ...and cleared, not left at 20%
