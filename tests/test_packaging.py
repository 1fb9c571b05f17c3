"""The package as pip sees it: declared dependencies match what the code imports, and the requirement files
that quickstart.sh and .ci/run install agree with pyproject.toml."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
IMPORT_TO_DIST = {"yaml": "pyyaml", "unidiff": "unidiff", "packaging": "packaging"}


def _dist(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower()


def _requirements(name: str) -> set[str]:
    lines = (ROOT / name).read_text().splitlines()
    return {_dist(x) for x in lines if x.strip() and not x.lstrip().startswith("#")}


def _third_party_imports(package: Path) -> set[str]:
    found = set()
    for f in package.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in ("sglang_overlay", "sglang")}


def test_every_import_of_the_package_is_a_declared_dependency_and_nothing_more():
    declared = {_dist(d) for d in PYPROJECT["project"]["dependencies"]}
    imported = _third_party_imports(ROOT / "sglang_overlay")
    assert {IMPORT_TO_DIST.get(m, m) for m in imported} == declared, (imported, declared)
    assert "gitpython" not in declared  # git runs as a subprocess (gitcmd.py)


def test_requirement_files_agree_with_pyproject():
    project = PYPROJECT["project"]
    assert _requirements("requirements.txt") == {_dist(d) for d in project["dependencies"]}
    assert _requirements("requirements-bench.txt") == {_dist(d) for d in project["optional-dependencies"]["bench"]}
    assert _requirements("requirements-test.txt") == {_dist(d) for d in project["optional-dependencies"]["test"]}


def test_console_script_and_packages_name_real_code():
    module, func = PYPROJECT["project"]["scripts"]["sglang-overlay"].split(":")
    assert module == "sglang_overlay.cli" and func == "main"
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = {
        str(p.parent.relative_to(ROOT)).replace("/", ".") for p in (ROOT / "sglang_overlay").rglob("__init__.py")
    }
    assert listed == on_disk
