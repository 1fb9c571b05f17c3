"""bench.import_speed on a small real package: both arms import it in fresh interpreters and the figures print."""

from __future__ import annotations

from bench.import_speed import main


def test_it_times_both_arms_and_prints_the_paired_ratio(tmp_path, capsys):
    pkg = tmp_path / "tree" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(2000)))
    assert main(["--tree", str(tmp_path / "tree"), "--module", "pkg", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "source (no bytecode)" in out and "cached (bench bytecode_env)" in out and "ratio source/cached" in out
    assert not (pkg / "__pycache__").exists()  # the cache is the bench's own, the tree stays as it was


def test_a_module_that_does_not_import_is_an_error_naming_it(tmp_path):
    import pytest

    (tmp_path / "tree").mkdir()
    with pytest.raises(SystemExit, match="import nosuchmod"):
        main(["--tree", str(tmp_path / "tree"), "--module", "nosuchmod", "--runs", "1"])
