"""README.md's console sessions are what the commands print today.

Each ```console block is a list of `$ command` lines and their output, run in order in one project copy that
starts as quickstart.sh leaves it (the default set applied). A line `...` in the README stands for any lines; `...` inside a line, for any text there (a time, a date).
`python tests/test_readme.py` prints what each block's commands print now, to paste into the README.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHOWN = "/home/you/sglang-overlay"  # the project's path as the README shows it

from conftest import copy_project  # noqa: E402


def sessions(text: str) -> list[list[tuple[str, list[str]]]]:
    blocks = re.findall(r"^```console\n(.*?)^```", text, flags=re.M | re.S)
    out = []
    for block in blocks:
        steps: list[tuple[str, list[str]]] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                assert steps, f"README.md: a console block starts with output, not a command: {line!r}"
                steps[-1][1].append(line.rstrip())
        out.append(steps)
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and same_line(expected[0], actual[0]) and matches(expected[1:], actual[1:])


def same_line(expected: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual) is not None


def make_project(base: Path, pinned_tree: Path) -> tuple[Path, dict]:
    project = copy_project(base / "sglang-overlay")
    tree = project / ".sglang" / pinned_tree.name
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(pinned_tree), str(tree)], check=True)
    bindir = base / "bin"
    bindir.mkdir()
    entry = bindir / "sglang-overlay"  # the console script's name, so hints read as the README's
    entry.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from sglang_overlay.cli import main\nsys.exit(main())\n"
    )
    entry.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", COLUMNS="200")
    env.pop("SGLANG_OVERLAY_TREE", None)
    run(project, env, "sglang-overlay apply --set default")
    return project, env


def run(project: Path, env: dict, command: str) -> list[str]:
    proc = subprocess.run(
        ["bash", "-c", command], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    shown = proc.stdout.replace(str(project), SHOWN).replace(sys.executable, "python")
    return [line.rstrip() for line in shown.splitlines()]


def test_readme_sessions_print_what_the_commands_print(tmp_path, pinned_tree):
    blocks = sessions((ROOT / "README.md").read_text())
    assert blocks, "README.md has no console session to keep true"
    project, env = make_project(tmp_path, pinned_tree)
    for n, steps in enumerate(blocks, 1):
        for command, expected in steps:
            actual = run(project, env, command)
            assert matches(expected, actual), f"README.md console block {n}, `$ {command}` prints today:\n" + "\n".join(
                actual
            )


def test_the_matcher_fails_on_a_changed_line():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert not matches(["a", "...", "d"], ["a", "b", "c", "e"])
    assert not matches(["a"], ["a", "b"])
    assert matches(["out: .../bisect-..."], ["out: /x/bisect-235632"])
    assert not matches(["out: .../bisect-..."], ["out: /x/ablate-235632"])


if __name__ == "__main__":
    import tempfile

    from sglang_overlay.fetch import ensure_embedded
    from sglang_overlay.manifest import load_manifest

    tree, _ = ensure_embedded(ROOT, load_manifest(ROOT / "manifest.yaml").pin)
    with tempfile.TemporaryDirectory() as tmp:
        project, env = make_project(Path(tmp), tree.root)
        for n, steps in enumerate(sessions((ROOT / "README.md").read_text()), 1):
            print(f"--- block {n}")
            for command, _ in steps:
                print(f"$ {command}")
                print("\n".join(run(project, env, command)))
