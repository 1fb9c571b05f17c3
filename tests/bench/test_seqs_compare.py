"""bench.seqs_compare on files written as bench server-seqs writes them (its FORMAT), and on bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.seqs_compare import main
from bench.server_seqs import FORMAT


def _file(path: Path, outs: list[list[int]], gpus: list[str] | None = None, fmt: str = FORMAT) -> Path:
    rows = [
        {"text": f"p{i}", "prompt_ids": [1, i], "output_ids": o, "batch": "1" if i < 2 else "concurrent"}
        for i, o in enumerate(outs)
    ]
    src = {"set": "full", **({"gpus": gpus} if gpus else {})}
    path.write_text(json.dumps({"format": fmt, "model": {}, "new_tokens": 4, "source": src, "sequences": rows}))
    return path


def test_equal_files_exit_0(tmp_path, capsys):
    a = _file(tmp_path / "a.json", [[5, 6, 7, 8], [9, 9, 9, 9], [1, 2, 3, 4]])
    assert main([str(a), str(a)]) == 0
    assert "| 3 | 3 | 3 | - | equal, equal |" in capsys.readouterr().out


def test_where_two_machines_part_is_told_per_batch1_prompt(tmp_path, capsys):
    a = _file(tmp_path / "a.json", [[5, 6, 7, 8], [9, 9, 9, 9], [1, 2, 3, 4]], ["NVIDIA H100 80GB HBM3, 580"])
    # matched by prompt ids, not by order
    b = _file(tmp_path / "b.json", [[5, 6, 0, 0], [3, 9, 9, 9], [1, 2, 3, 4]], ["NVIDIA H200, 580"])
    doc = json.loads(b.read_text())
    doc["sequences"].reverse()
    b.write_text(json.dumps(doc))
    out = tmp_path / "s.md"
    assert main([str(a), str(b), "--out", str(out)]) == 1
    text = out.read_text()
    assert "| 3 | 1 | 2 | 1.0 | 2, 0 |" in text
    assert "(NVIDIA H100 80GB HBM3; full)" in text and "(NVIDIA H200; full)" in text


def test_a_longer_continuation_differs_where_the_shorter_ends(tmp_path, capsys):
    a = _file(tmp_path / "a.json", [[5, 6, 7, 8]])
    b = _file(tmp_path / "b.json", [[5, 6]])
    assert main([str(a), str(b)]) == 1
    assert "| 1 | 0 | 1 | 2 | 2 |" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "unreadable JSON"),
        (json.dumps({"format": "other/1"}), "format: 'other/1', expected"),
        (json.dumps({"format": FORMAT, "sequences": {}}), "sequences: missing or not a list"),
        (json.dumps({"format": FORMAT, "sequences": [{"prompt_ids": [1]}]}), "sequences[0]: needs prompt_ids"),
        (json.dumps({"format": FORMAT, "sequences": [{"prompt_ids": [[1]], "output_ids": [2]}]}), "lists of token ids"),
    ],
)
def test_a_file_that_is_not_a_sequences_file_is_exit_2_naming_it(tmp_path, capsys, content, says):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    good = _file(tmp_path / "a.json", [[5]])
    assert main([str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and says in err and "Traceback" not in err
    assert main([str(good), str(tmp_path / "missing.json")]) == 2
    assert "missing.json: not found" in capsys.readouterr().err


def test_no_prompt_in_common_is_exit_2(tmp_path, capsys):
    a = _file(tmp_path / "a.json", [[5]])
    doc = json.loads(a.read_text())
    doc["sequences"][0]["prompt_ids"] = [7, 7]
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    assert main([str(a), str(b)]) == 2
    assert "no prompt in common" in capsys.readouterr().err


@pytest.mark.parametrize(
    "row, says",
    [
        (
            {"prompt_ids": [[1]], "output_ids": [2]},
            "sequences[0]: prompt_ids and output_ids must be lists of token ids",
        ),
        ({"prompt_ids": [1], "output_ids": [{"a": 1}]}, "sequences[0]: prompt_ids and output_ids must be lists of"),
    ],
)
def test_ids_that_are_not_token_ids_are_exit_2(tmp_path, capsys, row, says):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": FORMAT, "sequences": [row]}))
    good = _file(tmp_path / "a.json", [[5]])
    assert main([str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and says in err and "Traceback" not in err


@pytest.mark.parametrize("gpus", [[3], "NVIDIA H100 80GB HBM3, 580", {"name": "H100"}])
def test_a_gpu_record_that_is_not_a_list_of_names_is_exit_2(tmp_path, capsys, gpus):
    bad = _file(tmp_path / "bad.json", [[5]])
    doc = json.loads(bad.read_text())
    doc["source"]["gpus"] = gpus
    bad.write_text(json.dumps(doc))
    good = _file(tmp_path / "a.json", [[5]])
    assert main([str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "source.gpus: expected a list of GPU names" in err


def test_out_in_a_new_directory_is_made(tmp_path, capsys):
    a = _file(tmp_path / "a.json", [[5]])
    out = tmp_path / "new" / "s.md"
    assert main([str(a), str(a), "--out", str(out)]) == 0
    assert out.read_text().startswith("# Two server-seqs files")


def test_out_that_cannot_be_written_is_exit_2(tmp_path, capsys):
    a = _file(tmp_path / "a.json", [[5]])
    (tmp_path / "f").write_text("")
    assert main([str(a), str(a), "--out", str(tmp_path / "f" / "s.md")]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "Traceback" not in err


def test_prompts_only_one_file_holds_are_named_and_not_called_alike(tmp_path, capsys):
    a = _file(tmp_path / "a.json", [[5, 6], [7, 8], [9, 9]])
    b = _file(tmp_path / "b.json", [[5, 6]])
    assert main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "| 1 | 1 | 1 | - |" in out and f"{a} has 2 prompt(s) the other lacks: not compared." in out


def test_a_prompt_listed_twice_is_exit_2_naming_both_rows(tmp_path, capsys):
    """Two continuations of one prompt in one file: keeping one (the last, as before) would call the file alike to
    another that holds either; it is not a file bench server-seqs writes."""
    a = _file(tmp_path / "a.json", [[5, 6, 7, 8], [9, 9, 9, 9], [1, 2, 3, 4]])
    doc = json.loads(a.read_text())
    doc["sequences"].append({**doc["sequences"][0], "output_ids": [0, 0, 0, 0]})
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    assert main([str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert f"{b}: sequences[3]: the same prompt_ids as sequences[0]" in err and "Traceback" not in err
