"""A rebase in progress, on disk: `pins/.rebase-VERSION.json` (where it is) beside `pins/.rebase-VERSION/`
(the new pin being built). Nothing of the project proper changes until the staging directory is renamed to
`pins/VERSION/`, after its manifest, written last; the progress file is then removed.

Each step writes its staged files first and the progress file after (atomically), so a step cut short is
done again from the same inputs with the same result. A staging directory without its progress file is what
a killed start left: nothing refers to it, and the next rebase removes it. `--abort` marks the progress file
first (`aborting`) and removes it last, so an abort cut short says so and is finished by `--abort` again."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import BadInput, StateError
from .manifest import Proof
from .progname import prog
from .state import Shape, read_own_file

PROGRESS_VERSION = 1
PINS_DIR = "pins"
VERSION_RE = re.compile(r"\d+(\.\d+)+([a-z]+\d*)?(\.post\d+)?")


def progress_fix() -> str:
    """The fix for a damaged rebase progress file (names the command the user ran)."""
    return (
        "sglang-overlay writes this file whole and atomically, so something else changed it: "
        f"`{prog()} rebase --abort` drops the rebase (the project is as it was before it), then start again"
    )


def check_version_arg(version: str) -> str:
    if not VERSION_RE.fullmatch(version or ""):
        raise BadInput(
            f"rebase: {version!r} is not a release version", hint=f"name a release, e.g. `{prog()} rebase 0.5.23`"
        )
    return version


def progress_path(project_root: Path, version: str) -> Path:
    return project_root / PINS_DIR / f".rebase-{version}.json"


def staging_dir(project_root: Path, version: str) -> Path:
    return project_root / PINS_DIR / f".rebase-{version}"


def pin_dir(project_root: Path, version: str) -> Path:
    return project_root / PINS_DIR / version


@dataclass(frozen=True)
class Result:
    status: str
    detail: str = ""
    files: tuple[tuple[str, str], ...] = ()
    proof: Proof | None = None
    stop: str = ""  # a skipped patch: why the rebase had stopped at it


@dataclass(frozen=True)
class Stop:
    kind: str  # a rebase_step.STOPS status
    patch: str
    files: tuple[str, ...]  # repo paths the release tree carries for the user (conflict markers, merges)
    message: str


@dataclass(frozen=True)
class Progress:
    target: str
    source: str  # the source manifest, relative to the project root
    source_pin: str
    wheel: str
    sha256: str
    order: tuple[str, ...]
    next: int = 0
    results: dict[str, Result] = field(default_factory=dict)
    stop: Stop | None = None
    started: str = ""
    aborting: bool = False  # `--abort` began: only finishing it is left (the tree may be put back already)
    source_files: dict[str, str] = field(default_factory=dict)  # what the rebase reads of the source pin: sha256

    def advanced(self, name: str, result: Result) -> Progress:
        return replace(self, next=self.order.index(name) + 1, results={**self.results, name: result}, stop=None)

    def to_bytes(self) -> bytes:
        def res(r: Result) -> dict[str, object]:
            proof = None
            if r.proof is not None:
                proof = {"file": r.proof.file, "symbols": list(r.proof.symbols), "contains": list(r.proof.contains)}
            out: dict[str, object] = {"status": r.status, "detail": r.detail, "files": [list(f) for f in r.files]}
            out["proof"] = proof
            if r.stop:
                out["stop"] = r.stop
            return out

        stop = None
        if self.stop is not None:
            s = self.stop
            stop = {"kind": s.kind, "patch": s.patch, "files": list(s.files), "message": s.message}
        return (
            json.dumps(
                {
                    "version": PROGRESS_VERSION,
                    "target": self.target,
                    "source": self.source,
                    "source_pin": self.source_pin,
                    "wheel": self.wheel,
                    "sha256": self.sha256,
                    "order": list(self.order),
                    "next": self.next,
                    "results": {n: res(r) for n, r in self.results.items()},
                    "stop": stop,
                    "started": self.started,
                    **({"aborting": True} if self.aborting else {}),
                    **({"source_files": self.source_files} if self.source_files else {}),
                },
                indent=1,
            )
            + "\n"
        ).encode()


def parse_progress(raw: bytes, path: Path) -> Progress:
    sh = Shape(path, "rebase progress", progress_fix())
    try:
        data = sh.load(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise StateError(f"{path}: the rebase progress is not UTF-8 ({e})", hint=progress_fix()) from e
    keys = ("version", "target", "source", "source_pin", "wheel", "sha256", "order", "next", "results", "stop")
    sh.keys(data, keys + ("started", "aborting", "source_files"))
    if data.get("version") != PROGRESS_VERSION:
        raise sh.fail("'version'", f"{data.get('version')!r}, this tool reads {PROGRESS_VERSION}")
    order = tuple(sh.name(n, "'order'") for n in sh.get(data, "order", list))
    nxt = sh.get(data, "next", int)
    if not 0 <= nxt <= len(order):
        raise sh.fail("'next'", f"{nxt} is outside the {len(order)} patches")
    results = {}
    for name, r in sh.get(data, "results", dict).items():
        key = f"'results'[{name!r}]"
        if name not in order or not isinstance(r, dict):
            raise sh.fail(key, "not a patch of the rebase, or not an object")
        sh.keys(r, ("status", "detail", "files", "proof", "stop"), key)
        files = tuple((sh.repo_path(f[0], key), str(f[1])) for f in sh.get(r, "files", list))
        proof = None
        if r.get("proof") is not None:
            pr = r["proof"]
            proof = Proof(
                sh.repo_path(pr.get("file"), key), tuple(pr.get("symbols") or ()), tuple(pr.get("contains") or ())
            )
        stop_why = str(r.get("stop") or "")
        results[name] = Result(sh.get(r, "status", str), sh.get(r, "detail", str), files, proof, stop_why)
    stop = None
    if data.get("stop") is not None:
        s = sh.get(data, "stop", dict)
        sh.keys(s, ("kind", "patch", "files", "message"), "'stop'")
        if s.get("patch") not in order:
            raise sh.fail("'stop' -> 'patch'", f"{s.get('patch')!r} is not a patch of the rebase")
        stop = Stop(
            sh.get(s, "kind", str),
            s["patch"],
            tuple(sh.repo_path(f, "'stop' -> 'files'") for f in sh.get(s, "files", list)),
            sh.get(s, "message", str),
        )
    return Progress(
        check_version_arg(sh.get(data, "target", str)),
        sh.get(data, "source", str),
        sh.get(data, "source_pin", str),
        sh.get(data, "wheel", str),
        sh.get(data, "sha256", str),
        order,
        nxt,
        results,
        stop,
        str(data.get("started") or ""),
        data.get("aborting") is True,
        {str(k): str(v) for k, v in sh.get(data, "source_files", dict).items()} if "source_files" in data else {},
    )


def read_progress(path: Path) -> Progress | None:
    raw = read_own_file(path, "the rebase progress", progress_fix())
    return None if raw is None else parse_progress(raw, path)


def in_progress(project_root: Path) -> list[str]:
    """Versions with a rebase in progress in this project."""
    folder = project_root / PINS_DIR
    if not folder.is_dir():
        return []
    return sorted(p.name[len(".rebase-") : -len(".json")] for p in folder.glob(".rebase-*.json"))
