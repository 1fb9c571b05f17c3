"""bench/results keeps reports, plots, JSONL stores and command files, but no raw log over 50 KB (GPU runs copy
the tree): a larger file must be a plot or a store listed with its reason in bench/results/large-files.txt."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 50_000  # bytes
WHOLE_KINDS = (".png", ".svg", ".jsonl")  # cutting them loses the figure or the data a report is rebuilt from
LISTING = "bench/results/large-files.txt"


def tracked(root: Path, under: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", under], cwd=root, capture_output=True, check=True
    ).stdout.decode()
    return [p for p in out.split("\0") if p]


def reasons(root: Path) -> dict[str, str]:
    listing = root / LISTING
    out: dict[str, str] = {}
    for line in listing.read_text().splitlines() if listing.is_file() else ():
        if line.strip() and not line.startswith("#"):
            path, _, why = line.partition(": ")
            out[path.strip()] = why.strip()
    return out


def problems(root: Path, under: str = "bench/results") -> list[str]:
    """Every tracked file over the limit that is not a listed plot/store, and every stale or reasonless listing."""
    why = reasons(root)
    found = []
    big = set()
    for rel in tracked(root, under):
        f = root / rel
        if f.is_symlink() or not f.is_file() or f.stat().st_size <= LIMIT:
            continue
        big.add(rel)
        size = f"{rel} is {f.stat().st_size / 1000:.1f} KB (over {LIMIT // 1000} KB)"
        if not rel.endswith(WHOLE_KINDS):
            found.append(f"{size}: keep its tail instead (tail -c {LIMIT // 2} FILE > FILE.tail && mv FILE.tail FILE)")
        elif not why.get(rel):
            found.append(f"{size}: list it in {LISTING} with why it is kept whole, or make it smaller")
    found += [
        f"{LISTING}: {rel} is not a tracked file over {LIMIT // 1000} KB: drop the line"
        for rel in why
        if rel not in big
    ]
    return found


def test_no_tracked_result_over_the_limit_without_a_reason():
    if not (ROOT / ".git").exists():
        pytest.fail("this check reads `git ls-files`: run the tests from a git checkout (CI clones one)")
    assert problems(ROOT) == []


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=repo, check=True, capture_output=True
    )


def test_the_check_catches_a_raw_log_an_unlisted_plot_and_a_stale_listing(tmp_path):
    repo = tmp_path / "r"
    res = repo / "bench" / "results" / "run"
    res.mkdir(parents=True)
    _git(repo, "init", "-q")
    (res / "server.log").write_bytes(b"x" * (LIMIT + 1))
    (res / "plot.png").write_bytes(b"p" * (LIMIT + 1))
    (res / "small.log").write_bytes(b"s" * LIMIT)  # at the limit: fine
    (res / "untracked.log").write_bytes(b"u" * (LIMIT * 2))  # not committed: not the tree's concern
    (repo / LISTING).write_text("bench/results/run/gone.jsonl: was big once\n")
    _git(
        repo,
        "add",
        "bench/results/run/server.log",
        "bench/results/run/plot.png",
        "bench/results/run/small.log",
        LISTING,
    )
    found = problems(repo)
    assert len(found) == 3, found
    assert "run/plot.png is 50.0 KB" in found[0] and "list it in" in found[0]
    assert "run/server.log is 50.0 KB" in found[1] and "keep its tail" in found[1]
    assert "gone.jsonl is not a tracked file" in found[2]
    # The log cut to its tail and the plot listed with a reason: clean.
    (res / "server.log").write_bytes(b"x" * (LIMIT // 2))
    (repo / LISTING).write_text("# PATH: reason\nbench/results/run/plot.png: the report's figure\n")
    assert problems(repo) == []
