import json

import numpy as np
import pytest

from agentgym_env_search.corpus import Corpus, CorpusFormatError


def test_rows_are_read_lazily_from_a_memory_mapped_file(toy_corpus, tmp_path):
    corpus = Corpus(toy_corpus, offsets_path=tmp_path / "offsets.npy", show_progress=False)
    assert len(corpus) == 6  # the blank line is not a passage
    assert corpus[0].title == "Paris" and corpus[0].id == "0"
    assert corpus[3].title == "Python (programming language)"
    assert corpus[5].contents.startswith("Jupiter\n")
    assert isinstance(corpus._offsets, np.memmap)
    with pytest.raises(IndexError, match="6 passages"):
        corpus[6]
    corpus.close()


def test_title_text_records_are_accepted(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": 1, "title": "T", "text": "body"}) + "\n")
    assert Corpus(path, offsets_path=tmp_path / "o.npy", show_progress=False)[0].contents == "T\nbody"


def test_missing_file_and_bad_lines_say_what_is_expected(tmp_path):
    with pytest.raises(CorpusFormatError, match="does not exist.*contents"):
        Corpus(tmp_path / "nope.jsonl")
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1, "body": "x"}\nnot json\n')
    corpus = Corpus(path, offsets_path=tmp_path / "o.npy", show_progress=False)
    with pytest.raises(CorpusFormatError, match="needs 'contents'"):
        corpus[0]
    with pytest.raises(CorpusFormatError, match="row 1: not a JSON object"):
        corpus[1]
