"""`build-wheel` on the real pinned wheel: local version, RECORD, and a real install into a fresh venv (the wheel is
cp312, so the venv needs a CPython 3.12; the test is skipped, saying so, without one). Reproducibility, modes, the
switch note and in-process builds use a small copy of the pinned wheel (tests/small_wheel.py): the same steps."""

from __future__ import annotations

import base64
import csv
import errno
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import run_cli
from small_wheel import cache_with, make_small_wheel, pin_manifest
from test_launch import make_project  # the same small project: the pin and overlay_identity

from sglang_overlay.fetch import pinned_wheel
from sglang_overlay.manifest import load_manifest

HTTP_SERVER = "python/sglang/srt/entrypoints/http_server.py"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("wheelproj"))


@pytest.fixture(scope="module")
def built(project, tmp_path_factory, pinned_tree) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("dist")
    proc = run_cli(
        "--manifest",
        str(project / "manifest.yaml"),
        "build-wheel",
        "--patches",
        "overlay_identity",
        "--out",
        str(out),
        check_rc=0,
    )
    fp = re.search(r"fingerprint ([0-9a-f]{64})", proc.stdout).group(1)
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1
    return wheels[0], fp


@pytest.fixture(scope="module")
def small(project, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A project pinning a small copy of the pinned wheel (tests/small_wheel.py) and the env whose cache holds it:
    for the cases about the build's steps, not the size of what it packs."""
    base = tmp_path_factory.mktemp("small")
    wheel = make_small_wheel(pinned_wheel(load_manifest(project / "manifest.yaml").pin), base / "wheel")
    (base / "proj").mkdir()
    proj = make_project(base / "proj")
    pin_manifest(proj / "manifest.yaml", wheel)
    return proj, {"SGLANG_OVERLAY_CACHE": str(cache_with(wheel, base / "cache"))}


@pytest.fixture(scope="module")
def small_built(small, tmp_path_factory) -> tuple[Path, str]:
    proj, env = small
    out = tmp_path_factory.mktemp("small-dist")
    argv = ("--manifest", str(proj / "manifest.yaml"), "build-wheel", "--patches", "overlay_identity")
    proc = run_cli(*argv, "--out", str(out), env={**env, "PYTHONHASHSEED": "1"}, check_rc=0)
    (wheel,) = out.glob("*.whl")
    return wheel, re.search(r"fingerprint ([0-9a-f]{64})", proc.stdout).group(1)


def python312() -> str | None:
    if sys.version_info[:2] == (3, 12):
        return sys.executable
    for cand in [shutil.which("python3.12"), *sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))]:
        if cand and subprocess.run([str(cand), "-c", "import ensurepip, venv"], capture_output=True).returncode == 0:
            return str(cand)
    return None


def test_name_version_metadata_and_record(built):
    wheel, fp = built
    version = f"0.5.17+ovl.fp{fp[:12]}"
    assert wheel.name == f"sglang-{version}-cp312-cp312-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = f"sglang-{version}.dist-info"
        assert not [n for n in names if n.startswith("sglang-0.5.17.dist-info/")]
        meta = z.read(f"{info}/METADATA").decode()
        assert re.search(rf"^Version: {re.escape(version)}$", meta, re.M)
        assert "overlay_identity" in re.search(r"^Summary: .*$", meta, re.M).group(0)
        ident = z.read("sglang/_overlay_build.py").decode()
        assert f"FINGERPRINT = {fp!r}" in ident and "PATCHES = ('overlay_identity',)" in ident
        assert "_overlay_identity()" in z.read("sglang/srt/entrypoints/http_server.py").decode()
        assert not [n for n in names if n.endswith(("/lock", "/journal"))]
        rows = list(csv.reader(io.StringIO(z.read(f"{info}/RECORD").decode())))
        assert names[-1] == f"{info}/RECORD" and rows[-1] == [f"{info}/RECORD", "", ""]
        listed = {r[0] for r in rows}
        assert listed == set(names)
        for path, digest, size in rows[:-1]:
            data = z.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}" and int(size) == len(data), path


def test_same_set_gives_a_byte_identical_wheel(small, small_built, tmp_path):
    # another process, another hash seed: nothing of the order or the stamps may come from either
    (proj, env), (wheel, _) = small, small_built
    argv = ("--manifest", str(proj / "manifest.yaml"), "build-wheel", "--patches", "overlay_identity")
    run_cli(*argv, "--out", str(tmp_path), env={**env, "PYTHONHASHSEED": "2"}, check_rc=0)
    assert (tmp_path / wheel.name).read_bytes() == wheel.read_bytes()


def test_installs_into_a_fresh_venv_and_pip_show_names_the_set(project, built, sglang_tree, pinned_tree, tmp_path):
    py = python312()
    if py is None:
        if os.environ.get("CI"):  # in CI a missing interpreter is a broken machine, not a pass
            pytest.fail("no CPython 3.12 to install the cp312 wheel into (install python3.12)")
        pytest.skip("no CPython 3.12 here to install the cp312 wheel into")
    wheel, fp = built
    venv = tmp_path / "venv"
    # this pip installs into the venv (`--python`): the venv's own copy (ensurepip) cost 10 s and proved nothing more
    subprocess.run([py, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "-q", "--no-deps", "--no-compile", str(wheel)], check=True)
    show = subprocess.run([*pip, "show", "-f", "sglang"], capture_output=True, text=True, check=True).stdout
    assert f"Version: 0.5.17+ovl.fp{fp[:12]}" in show
    assert "overlay_identity" in show
    assert "sglang/_overlay_build.py" in show
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # the patched file is byte for byte what `apply` makes of a checkout
    run_cli(
        "--manifest",
        str(project / "manifest.yaml"),
        "--tree",
        str(sglang_tree),
        "apply",
        "overlay_identity",
        check_rc=0,
    )
    assert (site / "sglang/srt/entrypoints/http_server.py").read_bytes() == (sglang_tree / HTTP_SERVER).read_bytes()
    ns: dict = {}
    exec((site / "sglang/_overlay_build.py").read_text(), ns)
    assert ns["FINGERPRINT"] == fp and ns["PATCHES"] == ("overlay_identity",)
    # the installed copy is a tree the tool manages: status names the set, revert restores the release
    cli = ("--manifest", str(project / "manifest.yaml"), "--tree", str(site))
    status = run_cli(*cli, "status", check_rc=0).stdout
    assert fp[:12] in status and re.search(r"\[x\] overlay_identity", status), status
    reverted = run_cli(*cli, "revert", "--all", check_rc=0).stdout
    # the release's own bytes (the embedded tree's working copy may carry a set: quickstart.sh applies one)
    pristine = subprocess.run(
        ["git", "show", f"v0.5.17:{HTTP_SERVER}"], cwd=pinned_tree, capture_output=True, check=True
    ).stdout
    assert (site / "sglang/srt/entrypoints/http_server.py").read_bytes() == pristine
    assert not (site / "sglang/_overlay_build.py").exists()
    # pip's version is still the wheel's (the dist-info is outside what a switch records: distinfo.py says why);
    # revert says so, and the command it gives makes pip agree (run offline, from the cached release wheel)
    show = subprocess.run([*pip, "show", "sglang"], capture_output=True, text=True, check=True).stdout
    assert f"Version: 0.5.17+ovl.fp{fp[:12]}" in show
    assert f"pip still reports sglang 0.5.17+ovl.fp{fp[:12]}" in reverted, reverted
    fix = re.search(r"`pip (install [^`]+)`", reverted).group(1).split()
    release = pinned_wheel(load_manifest(project / "manifest.yaml").pin)
    # --no-compile: pip's bytecode of 4,000 modules is half this test's time and nothing it checks
    subprocess.run([*pip, *fix, "--no-index", "--find-links", str(release.parent), "--no-compile", "-q"], check=True)
    show = subprocess.run([*pip, "show", "sglang"], capture_output=True, text=True, check=True).stdout
    assert "Version: 0.5.17\n" in show and "sglang-overlay" not in show, show
    assert (site / "sglang/srt/entrypoints/http_server.py").read_bytes() == pristine
    assert "applied 0 of 1" in run_cli(*cli, "status", check_rc=0).stdout


def test_a_switch_says_when_pips_version_no_longer_names_the_set(small, small_built, tmp_path):
    """The wheel unpacked as pip lays it out (no interpreter needed): a set other than the wheel's is said to
    leave pip's version stale, with the fix for that set; the wheel's own set again is not."""
    (proj, env), (wheel, fp) = small, small_built
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    cli = ("--manifest", str(proj / "manifest.yaml"), "--tree", str(site))
    out = run_cli(*cli, "revert", "--all", env=env, check_rc=0).stdout
    assert f"note: pip still reports sglang 0.5.17+ovl.fp{fp[:12]} (sglang-0.5.17+ovl.fp{fp[:12]}.dist-info" in out, out
    assert "now carries no patches" in out and "pip install --no-deps --force-reinstall sglang==0.5.17" in out, out
    out = run_cli(*cli, "apply", "overlay_identity", env=env, check_rc=0).stdout
    assert "pip still reports" not in out, out  # the wheel's version names this set again


def test_a_new_executable_file_is_executable_in_the_wheel(small, tmp_path):
    # the archive gave every added file 0644: a diff's `new file mode 100755` lost its bit once installed
    from test_engine import NEW_TOOL, TOOL, mode_project

    _, env = small
    proj = mode_project(tmp_path, NEW_TOOL)
    pin_manifest(proj / "manifest.yaml", next(Path(env["SGLANG_OVERLAY_CACHE"]).glob("wheels/*.whl")))
    run_cli(
        "--manifest",
        str(proj / "manifest.yaml"),
        "build-wheel",
        "--patches",
        "fx_exec,fx_overlay",
        "--out",
        str(tmp_path),
        env=env,
        check_rc=0,
    )
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        installed = TOOL.removeprefix("python/")
        assert z.getinfo(installed).external_attr >> 16 == 0o100755
        assert z.getinfo("sglang/srt/fx_overlay_module.py").external_attr >> 16 == 0o100644
        assert z.getinfo("sglang/srt/layers/amx_utils.py").external_attr >> 16 == 0o100755  # the release's own


def _installed(tmp_path, version: str):
    from sglang_overlay.tree import Tree

    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    info = site / f"sglang-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return Tree(site, "installed"), info


DIGITS_FP = ("0123456789" * 7)[:64]  # a short form of digits only, with a leading 0: about 1 set in 300


@pytest.mark.parametrize("fp", [DIGITS_FP, "0" * 12 + "a" * 52, "ab" * 32])
def test_the_wheels_version_keeps_the_short_fingerprint_as_written(fp):
    """A local segment of digits only is a number to PEP 440: +ovl.012345678901 was written +ovl.12345678901, and
    `pip show` did not show the fingerprint's 12-character prefix that `launch` and `fingerprint --short` print."""
    from packaging.version import Version

    from sglang_overlay.commands.build_wheel import local_version

    version = local_version("0.5.17", fp)
    assert version == f"0.5.17+ovl.fp{fp[:12]}" and str(Version(version)) == version, version


@pytest.mark.parametrize("version", ["0.5.17+ovl.fp012345678901", "0.5.17+ovl.12345678901", "0.5.17+ovl.012345678901"])
def test_a_wheel_of_the_set_is_not_said_stale_in_either_format(project, tmp_path, monkeypatch, version):
    """The dist-info of a wheel of this set, as build-wheel writes it now (+ovl.fp<12 hex>) and as it wrote it before
    (+ovl.<12 hex>, PEP 440-normalized: the leading 0 of digits only dropped), is not said stale; of another set,
    it is."""
    from sglang_overlay import distinfo

    m = load_manifest(project / "manifest.yaml")
    tree, info = _installed(tmp_path, version)
    monkeypatch.setattr(distinfo, "fingerprint", lambda manifest, patches: DIGITS_FP)
    assert distinfo.stale_version(tree, m, ("overlay_identity",)) is None
    monkeypatch.setattr(distinfo, "fingerprint", lambda manifest, patches: "1" + DIGITS_FP[1:])  # another set
    note = distinfo.stale_version(tree, m, ("overlay_identity",))
    assert note is not None and f"pip still reports sglang {version} ({info.name}:" in note, note


def test_a_full_disk_hint_names_the_nearest_existing_directory(tmp_path):
    # an output directory not made yet: `df -h` of it fails, so the hint names the nearest ancestor that exists
    from sglang_overlay.errors import os_failure

    err = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    hint = os_failure(err, "cannot write", "nothing changed", path=tmp_path / "a" / "b" / "x.whl").hint
    assert f"`df -h {tmp_path}`" in hint, hint


def test_builds_of_one_wheel_in_one_process_each_finish(small, tmp_path):
    """A partial file was named `<host>.<pid namespace>.<pid>`, the same for every build of a process: a second
    build of the wheel (a caller building in threads) while the first wrote it failed "File exists", said to have
    written no wheel. Each build's partial file has a name of its own, which the cleanup still knows as this
    process's (tests/test_build_wheel_faults.py: a killed one is removed, a live one kept)."""
    import threading

    from sglang_overlay import partfile
    from sglang_overlay.commands.build_wheel import build

    proj, env = small
    m = load_manifest(proj / "manifest.yaml")
    src = next(Path(env["SGLANG_OVERLAY_CACHE"]).glob("wheels/*.whl"))
    out = tmp_path / "dist"
    first = build(m, ("overlay_identity",), src, out)
    wheel = first.read_bytes()
    assert build(m, ("overlay_identity",), src, out) == first  # one after another
    with partfile.PartFile(first) as writing:  # a build of the same wheel in this process, not finished
        assert build(m, ("overlay_identity",), src, out) == first
        assert writing.path.exists()
    failed: list[BaseException] = []

    def one() -> None:
        try:
            build(m, ("overlay_identity",), src, out)
        except BaseException as e:  # said by the assert below, in the test's thread
            failed.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == [], failed
    assert os.listdir(out) == [first.name], os.listdir(out)
    assert first.read_bytes() == wheel  # none wrote over another's bytes
