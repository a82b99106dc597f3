import importlib.util
import json

import pytest

from agentgym_env_search.qa import QADataError, load_qa_dir, load_qa_file


def test_per_dataset_layout_with_dev_fallback(toy_qa_dir):
    qa = load_qa_dir(toy_qa_dir, test_datasets=["nq", "hotpotqa"], train_datasets=["nq", "hotpotqa"])
    assert [i.dataset for i in qa.splits["test"]] == ["nq", "nq", "hotpotqa"]  # hotpotqa from dev.jsonl
    assert qa.splits["test"][1].golden_answers == ["Guido van Rossum", "van Rossum"]
    assert [i.question for i in qa.splits["train"]][0] == "What is the capital of Germany?"
    ordered = qa.ordered()
    assert [split for split, _ in ordered] == ["test"] * 3 + ["train"] * 2


def test_missing_datasets_are_listed_with_the_paths_tried(toy_qa_dir):
    with pytest.raises(QADataError) as error:
        load_qa_dir(toy_qa_dir)  # all seven by default; the toy dir has two
    message = str(error.value)
    for name in ("triviaqa", "popqa", "2wikimultihopqa", "musique", "bamboogle"):
        assert f"{name} (test)" in message
    assert str(toy_qa_dir / "bamboogle" / "test.jsonl") in message
    assert "nq (test)" not in message


def test_unknown_names_and_missing_directory(toy_qa_dir, tmp_path):
    with pytest.raises(QADataError, match="unknown dataset 'squad'"):
        load_qa_dir(toy_qa_dir, test_datasets=["squad"])
    with pytest.raises(QADataError, match="does not exist.*train.parquet"):
        load_qa_dir(tmp_path / "absent")


def test_merged_search_r1_layout_takes_dataset_from_data_source(tmp_path):
    rows = [{"id": "a", "question": "q1", "data_source": "nq", "reward_model": {"ground_truth": {"target": ["x"]}}},
            {"id": "b", "question": "q2", "data_source": "bamboogle", "golden_answers": ["y", "z"]}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    qa = load_qa_dir(tmp_path, test_datasets=["nq", "bamboogle"], train_datasets=[])
    assert [(i.dataset, i.golden_answers) for i in qa.splits["test"]] == [("nq", ["x"]), ("bamboogle", ["y", "z"])]
    with pytest.raises(QADataError, match="no questions of popqa"):
        load_qa_dir(tmp_path, test_datasets=["nq", "popqa"], train_datasets=[])


def test_malformed_records_name_the_record(tmp_path):
    path = tmp_path / "nq" / "test.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps({"query": "q"}) + "\n")
    with pytest.raises(QADataError, match="record 0: a question record needs 'question'"):
        load_qa_file(path)


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow is installed")
def test_parquet_without_pyarrow_says_how_to_install(tmp_path):
    path = tmp_path / "test.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(QADataError, match=r"pip install 'pyarrow>=12'"):
        load_qa_file(path)


def test_parquet_files_are_read_when_pyarrow_is_installed(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"question": ["q1"], "golden_answers": [["a", "b"]], "data_source": ["popqa"]})
    pq.write_table(table, tmp_path / "test.parquet")
    qa = load_qa_dir(tmp_path, test_datasets=["popqa"], train_datasets=[])
    assert qa.splits["test"][0].golden_answers == ["a", "b"]
