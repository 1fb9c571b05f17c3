"""The package as pip sees it: declared dependencies match what the code imports, and the requirement files
that quickstart.sh and .ci/run install agree with pyproject.toml."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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
    assert module == "sglang_overlay.entry" and func == "main"
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = {
        str(p.parent.relative_to(ROOT)).replace("/", ".") for p in (ROOT / "sglang_overlay").rglob("__init__.py")
    }
    assert listed == on_disk | {"sglang_overlay_bench"}
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {"sglang_overlay_bench": "bench"}


def test_the_bench_imports_itself_relatively_and_only_its_extra():
    """Installed as sglang_overlay_bench, a `bench.x` import would find nothing (or another package's bench)."""
    extra = {_dist(d) for d in PYPROJECT["project"]["optional-dependencies"]["bench"]}
    allowed = extra | {_dist(d) for d in PYPROJECT["project"]["dependencies"]} | {"torch"}  # torch: the GPU host's
    for f in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                assert top != "bench", f"{f.name}: `{n}`: import it relatively (from .x import ...)"
                if top not in sys.stdlib_module_names and top not in ("sglang_overlay", "sglang"):
                    assert IMPORT_TO_DIST.get(top, top) in allowed, f"{f.name}: {top} is in no extra"


# -- the installed command, as a user gets it ------------------------------------------------------------------
# A fresh venv and a real `pip install` (not editable) of a copy of the sources the wheel is built from, with its
# dependencies resolved by pip from the configured index (this machine's is local, ~15 s in all). Then the
# console script runs from directories outside the checkout, with nothing of the checkout on sys.path.


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("install")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "sglang_overlay", src / "sglang_overlay", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "bench", src / "bench", ignore=shutil.ignore_patterns("__pycache__", "results"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
        capture_output=True,
        text=True,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return venv / "bin" / "sglang-overlay"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_") and k != "PYTHONPATH"}
    env["SGLANG_OVERLAY_CACHE"] = os.environ.get("SGLANG_OVERLAY_CACHE") or str(Path.home() / ".cache/sglang-overlay")
    return env


def _sh(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=_clean_env())


@pytest.mark.install
def test_installed_command_works_from_another_directory(installed, tmp_path, sglang_tree):
    project = tmp_path / "my-patches"
    shutil.copytree(ROOT / "tests" / "fixtures" / "engine", project, ignore=shutil.ignore_patterns("make_fixtures.py"))
    inside = project / "overlay"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    exe = str(installed)

    where = _sh(
        [str(installed.parent / "python"), "-c", "import sglang_overlay; print(sglang_overlay.__file__)"], elsewhere
    )
    assert "site-packages" in where.stdout and str(ROOT) not in where.stdout

    usage = _sh([exe, "--help"], elsewhere)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: sglang-overlay "), usage.stdout

    status = _sh([exe, "--tree", str(sglang_tree), "status"], inside)  # found upward from overlay/
    assert status.returncode == 0, status.stderr
    assert "fx_topk" in status.stdout and "applied 0 of" in status.stdout

    applied = _sh([exe, "--project", str(project), "--tree", str(sglang_tree), "apply", "--set", "default"], elsewhere)
    assert applied.returncode == 0, applied.stderr
    again = _sh([exe, "--project", str(project), "--tree", str(sglang_tree), "status", "--json"], elsewhere)
    assert json.loads(again.stdout)["applied"] == ["fx_topk", "fx_args_a"]

    check = _sh([exe, "--project", str(project), "check"], elsewhere)
    assert check.returncode == 0 and "checks passed" in check.stdout, check.stdout + check.stderr

    lost = _sh([exe, "status"], elsewhere)  # no project above: the fix names the installed command
    assert lost.returncode == 2 and "run sglang-overlay inside a project" in lost.stderr, lost.stderr
    no_tree = _sh([exe, "status"], project)
    assert no_tree.returncode == 2 and "run `sglang-overlay fetch`" in no_tree.stderr
    assert f"{project}/.sglang/sglang-0.5.17" in no_tree.stderr  # the embedded tree belongs to the project found


@pytest.mark.install
def test_the_bench_without_its_extra_is_exit_2_naming_the_pip_command(installed, tmp_path):
    """The plain install carries the bench's code, not scipy: a measurement or a report says how to add it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for argv in (["bench", "ab", "--arms", "a=none", "b=none"], ["bench", "report", str(tmp_path)]):
        p = _sh([str(installed), *argv], elsewhere)
        assert p.returncode == 2 and "pip install 'sglang-overlay[bench]'" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    help_ = _sh([str(installed), "bench", "bisect", "--help"], elsewhere)  # the parser needs no extra
    assert help_.returncode == 0 and help_.stdout.startswith("usage: sglang-overlay bench bisect"), help_.stderr


@pytest.fixture(scope="module")
def installed_bench(tmp_path_factory) -> Path:
    """`pip install '.[bench]'` into a fresh venv, offline: the extra's packages are this interpreter's (a .pth
    names its site-packages; pip finds them installed), the package itself is built and installed fresh."""
    import sysconfig

    work = tmp_path_factory.mktemp("install-bench")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("sglang_overlay", "bench"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "results"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], **_OUT).stdout
    Path(site.strip(), "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = subprocess.run(
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--no-build-isolation"]
        + [f"{src}[bench]"],
        **_OUT,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return venv / "bin" / "sglang-overlay"


_OUT = {"capture_output": True, "text": True}


@pytest.mark.install
def test_the_bench_installed_with_its_extra_measures_from_another_directory(installed_bench, tmp_path):
    """The README's CPU path: `bench bisect --help`, then an ab against the stand-in server writes a report
    under the project's bench/results (the default --out), found from the manifest the tool found."""
    sys.path.insert(0, str(ROOT / "tests" / "bench"))
    from bench_fixtures import FAKE, make_manifest

    m = make_manifest(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _sh(
        [str(installed_bench.parent / "python"), "-c", "import sglang_overlay_bench as b; print(b.__file__)"], elsewhere
    )
    assert "site-packages" in where.stdout and str(ROOT) not in where.stdout, where.stdout + where.stderr
    help_ = _sh([str(installed_bench), "bench", "bisect", "--help"], elsewhere)
    assert help_.returncode == 0 and "--good GOOD --bad BAD" in help_.stdout, help_.stderr
    run = _sh(
        [str(installed_bench), "--manifest", str(m), "bench", "ab", "--arms", "a=base", "b=full", "--launcher"]
        + [f"{sys.executable} {FAKE}", "--restarts", "3", "--max-starts", "3", "--reps-per-start", "2"]
        + ["--warmup-reps", "0", "--max-new-tokens", "32", "--no-warmup-start", "--", "--tp", "1"],
        elsewhere,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    (report,) = (m.parent / "bench" / "results").glob("*/ab-*/report.md")
    assert "## Conclusion" in report.read_text() and "b vs a" in report.read_text()
