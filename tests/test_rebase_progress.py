"""The rebase progress file's record of the user's own work: what `rebase --abort` keeps is told by a typed
flag, not by the words of a detail text (which a later wording change would silently break)."""

from __future__ import annotations

import json

import pytest

from sglang_overlay.errors import StateError
from sglang_overlay.rebase_state import PROOF_BY_HAND, Progress, Result, parse_progress
from sglang_overlay.record import replace

NAME = ".rebase-9.0.1.json"


def _progress(**results: Result) -> Progress:
    return Progress("9.0.1", "manifest.yaml", "", "w.whl", "0" * 64, tuple(results), len(results), dict(results))


def test_the_users_work_is_a_flag_that_survives_the_file_whatever_the_detail_says(tmp_path):
    p = _progress(a=Result("upstreamed-moved", "reworded detail", by_hand=True), b=Result("clean", "applied"))
    read = parse_progress(p.to_bytes(), tmp_path / NAME)
    assert read.results["a"].by_hand and not read.results["b"].by_hand
    assert read == p


def test_a_file_from_before_the_flag_is_read_by_its_words(tmp_path):
    p = _progress(
        a=Result("upstreamed-moved", f"{PROOF_BY_HAND}: python/sglang/x.py"),
        b=Result("resolved", "resolved by hand: python/sglang/y.py"),
        c=Result("clean", "applied"),
    )
    data = json.loads(p.to_bytes())
    assert data["version"] == 2
    data["version"] = 1
    for r in data["results"].values():  # as the older tool wrote it
        del r["by_hand"]
    read = parse_progress(json.dumps(data).encode(), tmp_path / NAME)
    assert [read.results[n].by_hand for n in "abc"] == [True, True, False]
    # in a file that has the key, the key decides, whatever the words say
    assert not parse_progress(p.to_bytes(), tmp_path / NAME).results["a"].by_hand


@pytest.mark.parametrize("value", ["yes", 1, []])
def test_a_flag_that_is_no_boolean_is_refused_by_its_key(tmp_path, value):
    data = json.loads(_progress(a=replace(Result("clean", "applied"), by_hand=True)).to_bytes())
    data["results"]["a"]["by_hand"] = value
    with pytest.raises(StateError) as e:
        parse_progress(json.dumps(data).encode(), tmp_path / NAME)
    assert "by_hand" in str(e.value) and str(tmp_path / NAME) in str(e.value)


def test_a_file_of_this_version_without_the_flag_is_refused_by_its_key(tmp_path):
    data = json.loads(_progress(a=Result("clean", "applied")).to_bytes())
    del data["results"]["a"]["by_hand"]
    with pytest.raises(StateError) as e:
        parse_progress(json.dumps(data).encode(), tmp_path / NAME)
    assert "'by_hand'" in str(e.value) and "missing" in str(e.value), e.value


def test_a_file_of_a_newer_version_is_refused_by_its_version(tmp_path):
    data = json.loads(_progress(a=Result("clean", "applied")).to_bytes())
    data["version"] = 3
    with pytest.raises(StateError) as e:
        parse_progress(json.dumps(data).encode(), tmp_path / NAME)
    assert "'version'" in str(e.value) and "this tool reads 1 and 2" in str(e.value), e.value
