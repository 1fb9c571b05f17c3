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
from pathlib import Path
from typing import Any

from .errors import BadInput, StateError
from .manifest import PROOF_KEYS, Proof
from .progname import prog
from .record import Record, field, replace
from .repopath import check_repo_path
from .state import Shape, read_own_file

# 2: every result carries `by_hand`. A version-1 file (a rebase begun by an older release) is still read, its
# by_hand told from its words; an older release refuses a version-2 file by its version, not as damaged.
PROGRESS_VERSION = 2
PROGRESS_VERSIONS_READ = (1, 2)
PINS_DIR = "pins"
# numbers without leading zeros: PyPI reads "0.5.018" as 0.5.18, which is then not the release that was named
VERSION_RE = re.compile(r"(0|[1-9]\d*)(\.(0|[1-9]\d*))+([a-z]+\d*)?(\.post\d+)?")


def progress_fix() -> str:
    """The fix for a damaged rebase progress file (names the command the user ran)."""
    return (
        "sglang-overlay writes this file whole and atomically, so something else changed it: "
        f"`{prog()} rebase --abort` drops the rebase (the project is as it was before it), then start again"
    )


def _inside(rel: str) -> bool:
    """A path the progress file names relative to the project, that stays inside it (no `..`)."""
    return bool(rel) and not rel.startswith("/") and ".." not in rel.split("/")


def check_version_arg(version: str) -> str:
    if not VERSION_RE.fullmatch(version or ""):
        raise BadInput(
            f"rebase: {version!r} is not a release version", hint=f"name a release, e.g. `{prog()} rebase 0.5.23`"
        )
    return version


def parse_proof(raw: Any, label: str, key: str, *, hint: str, error: type[BadInput] = BadInput) -> Proof:
    """A proof the rebase keeps (in its progress file, or the one a user rewrites at a stop), checked as the
    manifest's `proof:` is: the new pin's manifest is written from it at the end, where a proof that proves
    nothing would fail to load long after the step that took it was recorded. `label` names the file, `key`
    where the proof is in it ('' for a whole file)."""

    def fail(sub: str, problem: str) -> BadInput:
        full = " -> ".join(k for k in (key, sub) if k)
        return error(f"{label}: key {full}: {problem}" if full else f"{label}: {problem}", hint=hint)

    if not isinstance(raw, dict):
        raise fail("", f"expected a mapping of {', '.join(PROOF_KEYS)}, got {raw!r:.80}")
    extra = sorted(str(k) for k in raw if k not in PROOF_KEYS)
    if extra:
        raise fail("", f"unknown key(s) {', '.join(map(repr, extra))}")
    file = _repo_path(raw.get("file"), f"{label}: key {' -> '.join(k for k in (key, repr('file')) if k)}", hint, error)
    lists: dict[str, tuple[str, ...]] = {}
    for name in ("symbols", "contains"):
        value = raw.get(name)
        if value is None:
            value = []
        # a string is a sequence too: taken as a list it became one `contains` line per character
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise fail(repr(name), f"expected a list of non-empty strings, got {value!r:.80}")
        lists[name] = tuple(value)
    if not lists["symbols"] and not lists["contains"]:
        raise fail("", "names no symbols and no contains: it would prove nothing")
    return Proof(file, lists["symbols"], lists["contains"])


def _repo_path(value: Any, where: str, hint: str, error: type[BadInput]) -> str:
    """check_repo_path, its error carrying this file's fix (its own says how to name a path in a manifest)."""
    try:
        return check_repo_path(value, where)
    except BadInput as e:
        raise error(str(e), hint=hint) from None


def progress_path(project_root: Path, version: str) -> Path:
    return project_root / PINS_DIR / f".rebase-{version}.json"


def staging_dir(project_root: Path, version: str) -> Path:
    return project_root / PINS_DIR / f".rebase-{version}"


def pin_dir(project_root: Path, version: str) -> Path:
    return project_root / PINS_DIR / version


class Result(Record):
    status: str
    detail: str = ""
    files: tuple[tuple[str, str], ...] = ()
    proof: Proof | None = None
    stop: str = ""  # a skipped patch: why the rebase had stopped at it
    by_hand: bool = False  # the user's own work (a conflict resolved, a proof rewritten at a stop): an abort keeps it


# what a progress file written before `by_hand` was kept says in a proof rewritten by hand's detail
PROOF_BY_HAND = "proof rewritten by hand"


class Stop(Record):
    kind: str  # a rebase_step.STOPS status
    patch: str
    files: tuple[str, ...]  # repo paths the release tree carries for the user (conflict markers, merges)
    message: str


class Progress(Record):
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
            out["by_hand"] = r.by_hand  # always: a file without it is an older tool's, read by the detail's words
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
    """Every key type-checked: what is read here is indexed, iterated and written back into the new pin, so a
    damaged file must fail here, naming its key (exit 2), not as a crash in a later step."""
    from .carry import STOPS  # here: `--pin V status` imports this module (pins.py), and carry imports compose

    sh = Shape(path, "rebase progress", progress_fix())
    try:
        data = sh.load(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise StateError(f"{path}: the rebase progress is not UTF-8 ({e})", hint=progress_fix()) from e
    keys = ("version", "target", "source", "source_pin", "wheel", "sha256", "order", "next", "results", "stop")
    sh.keys(data, keys + ("started", "aborting", "source_files"))
    version = data.get("version")
    if version not in PROGRESS_VERSIONS_READ or isinstance(version, bool):
        raise sh.fail("'version'", f"{version!r}, this tool reads {' and '.join(map(str, PROGRESS_VERSIONS_READ))}")
    target = sh.get(data, "target", str)
    if not VERSION_RE.fullmatch(target) or path.name != f".rebase-{target}.json":
        raise sh.fail("'target'", f"{target!r:.80} is not the release this file is named for")
    order = tuple(sh.name(n, "'order'") for n in sh.get(data, "order", list))
    if len(set(order)) != len(order):
        raise sh.fail("'order'", "names a patch twice")
    nxt = sh.get(data, "next", int)
    if not 0 <= nxt <= len(order):
        raise sh.fail("'next'", f"{nxt} is outside the {len(order)} patches")
    results = {}
    for name, r in sh.get(data, "results", dict).items():
        key = f"'results'[{name!r}]"
        where = f"{path}: rebase progress: key {key}"
        if name not in order or not isinstance(r, dict):
            raise sh.fail(key, "not a patch of the rebase, or not an object")
        sh.keys(r, ("status", "detail", "files", "proof", "stop", "by_hand"), key)
        files = []
        for f in sh.get(r, "files", list):
            if not (isinstance(f, list) and len(f) == 2 and isinstance(f[1], str)):
                raise sh.fail(f"{key} -> 'files'", f"expected [repo path, status] pairs, got {f!r:.80}")
            files.append((_repo_path(f[0], f"{where} -> 'files'", progress_fix(), StateError), f[1]))
        proof = None
        if r.get("proof") is not None:
            proof = parse_proof(
                r["proof"], f"{path}: rebase progress", f"{key} -> 'proof'", hint=progress_fix(), error=StateError
            )
        status = sh.get(r, "status", str)
        if not status:
            raise sh.fail(f"{key} -> 'status'", "empty")
        stop_why = sh.get(r, "stop", str, optional=True) or ""
        detail = sh.get(r, "detail", str)
        if version == 1:  # a file from before the key: told by the status and the detail's words, as it was then
            sh.keys(r, ("status", "detail", "files", "proof", "stop"), key)
            by_hand = status == "resolved" or detail.startswith(PROOF_BY_HAND)
        else:
            by_hand = sh.get(r, "by_hand", bool)
        results[name] = Result(status, detail, tuple(files), proof, stop_why, by_hand)
    stop = None
    if data.get("stop") is not None:
        s = sh.get(data, "stop", dict)
        sh.keys(s, ("kind", "patch", "files", "message"), "'stop'")
        if s.get("patch") not in order:
            raise sh.fail("'stop' -> 'patch'", f"{s.get('patch')!r:.80} is not a patch of the rebase")
        kind = sh.get(s, "kind", str)
        if kind not in STOPS:
            raise sh.fail("'stop' -> 'kind'", f"{kind!r:.80} is not one of {', '.join(STOPS)}")
        stop = Stop(
            kind,
            s["patch"],
            tuple(
                _repo_path(f, f"{path}: rebase progress: key 'stop' -> 'files'", progress_fix(), StateError)
                for f in sh.get(s, "files", list)
            ),
            sh.get(s, "message", str),
        )
    source_files = {}
    for rel, digest in (sh.get(data, "source_files", dict, optional=True) or {}).items():
        if not _inside(rel):
            raise sh.fail("'source_files'", f"{rel!r:.80} is not a path inside the project")
        source_files[rel] = sh.required_digest(digest, f"'source_files' -> {rel!r:.80}")
    source = sh.get(data, "source", str)
    if not _inside(source):
        raise sh.fail("'source'", f"{source!r:.80} is not a path inside the project")
    return Progress(
        target,
        source,
        sh.get(data, "source_pin", str),
        sh.get(data, "wheel", str),
        sh.required_digest(data.get("sha256"), "'sha256'"),
        order,
        nxt,
        results,
        stop,
        sh.get(data, "started", str, optional=True) or "",
        sh.get(data, "aborting", bool, optional=True) is True,
        source_files,
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
