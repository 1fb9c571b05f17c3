"""bench/results holds records, not a lab (issue 39): each record is a folder with its README.md, one command.txt at
its top, reports (.md), plots (.png, .svg) and stores (.jsonl, .json); no code, no raw logs. One index,
bench/results/README.md, links every record. The tracked files stay small and few."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNDER = "bench/results"
INDEX = f"{UNDER}/README.md"
KINDS = (".md", ".png", ".svg", ".jsonl", ".json")  # plus command.txt
MAX_FILES = 160  # the repository's bar is 350 tracked files; the tool, bench and tests take about 200
MAX_BYTES = 5_000_000
MAX_FILE = 512_000  # the largest store kept is 241 KB
MAX_TEXT = 50_000  # a report or README this long is a log


def tracked(root: Path, under: str = UNDER) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--", under], cwd=root, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def problems(root: Path, under: str = UNDER) -> list[str]:
    """Every way the tracked files under `under` break the layout above, one line each."""
    files = tracked(root, under)
    found: list[str] = []
    records: dict[str, list[str]] = {}
    for rel in files:
        parts = PurePosixPath(rel).relative_to(under).parts
        if len(parts) == 1:
            if parts[0] != "README.md":
                found.append(f"{rel}: only the index README.md sits beside the records; move it into a record")
            continue
        records.setdefault(parts[0], []).append("/".join(parts[1:]))
        name = parts[-1]
        if name != "command.txt" and not name.endswith(KINDS):
            found.append(f"{rel}: not a record's kind (README, .md report, plot, store, command.txt): remove it")
    for rec, inside in sorted(records.items()):
        if "README.md" not in inside:
            found.append(f"{under}/{rec}: no README.md at its top")
        if "command.txt" not in inside:
            found.append(f"{under}/{rec}: no command.txt at its top")
        found += [
            f"{under}/{rec}/{p}: fold it into {under}/{rec}/command.txt under '# {p.rsplit('/', 1)[0]}/'"
            for p in inside
            if p.endswith("/command.txt")
        ]
    index = root / INDEX
    text = index.read_text() if index.is_file() else ""
    if not text:
        found.append(f"{INDEX}: missing; it lists every record and what it showed")
    linked = set(re.findall(r"\]\(([^)/]+)/README\.md\)", text))
    found += [f"{INDEX}: no row links {rec}/README.md" for rec in sorted(set(records) - linked)]
    found += [f"{INDEX}: links {rec}/README.md, which is not a record here" for rec in sorted(linked - set(records))]
    sizes = {rel: (root / rel).stat().st_size for rel in files if (root / rel).is_file()}
    for rel, size in sizes.items():
        limit = MAX_TEXT if rel.endswith((".md", ".txt")) else MAX_FILE
        if size > limit:
            found.append(f"{rel}: {size} bytes, over {limit}")
    if len(files) > MAX_FILES:
        found.append(f"{under}: {len(files)} tracked files, over {MAX_FILES}")
    if sum(sizes.values()) > MAX_BYTES:
        found.append(f"{under}: {sum(sizes.values())} bytes tracked, over {MAX_BYTES}")
    return found


def test_the_recorded_runs_keep_the_layout():
    if not (ROOT / ".git").exists():
        pytest.fail("this check reads `git ls-files`: run the tests from a git checkout (CI clones one)")
    assert problems(ROOT) == []


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=repo, check=True, capture_output=True
    )


def _write(repo: Path, files: dict[str, str | bytes]) -> None:
    for rel, data in files.items():
        p = repo / UNDER / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())


def test_the_check_names_code_logs_missing_and_nested_commands_and_the_index(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    _write(
        repo,
        {
            "README.md": "| [good](good/README.md) | ok |\n| [lab](lab/README.md) | |\n| [gone](gone/README.md) | |\n",
            "good/README.md": "x",
            "good/command.txt": "python -m bench ab\n",
            "good/run/results.jsonl": "{}\n",
            "good/run/report.md": "r",
            "good/run/plot.png": b"p",
            "lab/README.md": "x",
            "lab/analyse.py": "print()",
            "lab/run/command.txt": "python -m bench ab\n",
            "lab/run/server.log": "log",
            "bare/notes.md": "n",
            "stray.sh": "true",
        },
    )
    (repo / UNDER / "untracked.py").write_text("")  # not committed: not the tree's concern
    _git(repo, "add", UNDER + "/README.md", UNDER + "/good", UNDER + "/lab", UNDER + "/bare", UNDER + "/stray.sh")
    found = problems(repo)
    expected = [
        "stray.sh: only the index",
        "lab/analyse.py: not a record's kind",
        "lab/run/server.log: not a record's kind",
        "bare: no README.md",
        "bare: no command.txt",
        "lab: no command.txt",
        "lab/run/command.txt: fold it into bench/results/lab/command.txt under '# run/'",
        "no row links bare/README.md",
        "links gone/README.md, which is not a record",
    ]
    assert len(found) == len(expected), found
    for want in expected:
        assert any(want in line for line in found), (want, found)
    assert not any("good" in line for line in found), found


def test_the_check_bounds_sizes_and_passes_a_new_record_of_readme_and_command(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    _write(
        repo,
        {
            "README.md": "| [2026-12-06-speed](2026-12-06-speed/README.md) | new |\n",
            "2026-12-06-speed/README.md": "x",
            "2026-12-06-speed/command.txt": "python -m bench ab\n",
        },
    )
    _git(repo, "add", UNDER)
    assert problems(repo) == []
    _write(repo, {"2026-12-06-speed/report.md": "x" * (MAX_TEXT + 1), "2026-12-06-speed/big.jsonl": b"{}" * MAX_FILE})
    _git(repo, "add", UNDER)
    found = problems(repo)
    assert len(found) == 2 and "report.md" in found[0] + found[1] and "big.jsonl" in found[0] + found[1], found
    (repo / UNDER / "2026-12-06-speed/report.md").write_text("short")
    (repo / UNDER / "2026-12-06-speed/big.jsonl").write_text("{}\n")
    assert problems(repo) == []
    _write(repo, {f"2026-12-06-speed/s{i}.jsonl": b"{}" * (MAX_FILE // 2) for i in range(MAX_BYTES // MAX_FILE + 1)})
    _git(repo, "add", UNDER)
    assert len(found := problems(repo)) == 1 and "bytes tracked, over" in found[0], found
    _git(repo, "rm", "-q", "-f", UNDER + "/2026-12-06-speed/s*.jsonl")
    _write(repo, {f"2026-12-06-speed/run/p{i}.png": b"p" for i in range(MAX_FILES)})
    _git(repo, "add", UNDER)
    assert problems(repo) == [f"{UNDER}: {MAX_FILES + 5} tracked files, over {MAX_FILES}"]
