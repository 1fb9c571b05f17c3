"""patches/NAME.patch: a DEP-3 header, a line `---`, then a git diff relative to the SGLang repository root.

Diffs are parsed with `unidiff` (a maintained parser) for their structure; applying is left to `git apply`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from .errors import ManifestError
from .parsecache import cached
from .progname import prog
from .record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any

HEADER_FIELDS = (
    "Description",
    "Origin",
    "Forwarded",
    "Applied-Upstream",
    "Last-Update",
    "Author",
    "Bug",
    "Subject",
    "Reviewed-By",
)
_FIELD_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]?(.*)$")
_DIFF_START = ("diff --git ", "--- ", "Index: ")
# git apply makes a symbolic link (120000) or a submodule entry (160000) from these: a link's "content" is a
# path, and once written every later read of the tree follows it, outside the tree (/etc/passwd) included.
_LINK_MODE_RE = re.compile(r"^(?:new file mode|deleted file mode|new mode|old mode|index \S+) (120000|160000)$", re.M)


class Hunk(Record):
    file: str
    index: int  # 1-based, within its file
    source_start: int
    source_length: int
    header: str  # "@@ -a,b +c,d @@"
    removed: tuple[str, ...]  # lines the hunk expects to find (context and '-'), in order
    added: tuple[str, ...]  # lines it leaves (context and '+')
    section: str  # git's function context after the second @@ ("def select_experts(")
    first_change: int  # source line of the first changed line: where the hunk's intent is


class PatchFile(Record):
    path: Path
    header: tuple[tuple[str, str], ...]  # DEP-3 fields in file order
    header_text: str  # everything before the diff, verbatim (refresh keeps it)
    body: bytes  # the diff, verbatim: what `git apply` reads and what the fingerprint hashes
    files: tuple[str, ...]  # repo paths touched
    created: tuple[str, ...]  # repo paths the diff creates
    deleted: tuple[str, ...]
    hunks: tuple[Hunk, ...]
    # repo paths the diff creates or deletes as executable (mode 100755): a created file lands with the exec
    # bit, a deleted one gets it back on revert (the state keeps bytes only, the diff names the mode)
    executable: tuple[str, ...] = ()

    def field(self, name: str) -> str | None:
        for k, v in self.header:
            if k.lower() == name.lower():
                return v
        return None

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.body).hexdigest()

    @property
    def applicable(self) -> bytes:
        """The body as `git apply` is given it: a file saved without its last newline is a corrupt patch to git,
        while check and apply must take or refuse the same files."""
        return self.body if self.body.endswith(b"\n") else self.body + b"\n"


def split_header(text: str) -> tuple[str, str]:
    """(header, diff). The header ends at a line `---` alone or where the first diff starts."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip("\r\n") == "---":
            return "".join(lines[: i + 1]), "".join(lines[i + 1 :])
        if line.startswith(_DIFF_START):
            return "".join(lines[:i]), "".join(lines[i:])
    return text, ""


def parse_header(header_text: str) -> tuple[tuple[str, str], ...]:
    fields: list[list[str]] = []
    for line in header_text.splitlines():
        if line.strip() == "---":
            break
        if line.startswith((" ", "\t")) and fields:
            fields[-1][1] += "\n" + line.strip()
            continue
        m = _FIELD_RE.match(line)
        if m:
            fields.append([m.group(1), m.group(2).strip()])
    return tuple((k, v) for k, v in fields)


def _strip_prefix(path: str | None, side: str, where: Path) -> str | None:
    if path is None or path == "/dev/null":
        return None
    if not path.startswith(side):
        # git apply strips one leading component: without a/ b/ the file would be written one level off.
        raise ManifestError(
            f"{where}: the diff names {path!r} without git's {side!r} prefix",
            hint=f"regenerate it with `git diff` (not --no-prefix), or `{prog()} refresh NAME`",
        )
    return path[2:]


def created_exec_bits(diffs: Iterable[PatchFile]) -> dict[str, bool]:
    """Each file these diffs create, and whether its mode line makes it executable (`new file mode 100755`).
    One entry adds a file (the manifest refuses a second), so no diff here overrides another's answer."""
    return {f: f in d.executable for d in diffs for f in d.created}


def parse_patch_file(path: Path) -> PatchFile:
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8-sig")  # an editor's byte-order mark is not part of the Description line
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: not UTF-8 text ({e})", hint="patches must be UTF-8 unified diffs") from e
    except OSError as e:
        raise ManifestError(
            f"{path}: cannot read the patch ({e.strerror})", hint="check the file and its permissions"
        ) from e
    header_text, diff_text = split_header(text)
    if re.search(r"^(diff --git |--- |\+\+\+ |@@ )[^\n]*\r$", diff_text, re.M):
        raise ManifestError(
            f"{path}: the diff has Windows (CRLF) line endings, so git apply would not match a line",
            hint="convert it back (`dos2unix FILE`), and set `git config core.autocrlf false` "
            "so a checkout does not convert it again",
        )
    link = _LINK_MODE_RE.search(diff_text)
    if link:
        kind = "symbolic link" if link.group(1) == "120000" else "submodule"
        raise ManifestError(
            f"{path}: line {header_text.count(chr(10)) + diff_text.count(chr(10), 0, link.start()) + 1}: the diff makes a {kind} "
            f"(mode {link.group(1)}); patches may only write regular files",
            hint="carry the file's content instead (`git diff` of a copy, or an overlay file)",
        )
    header = parse_header(header_text)
    if not any(k.lower() in ("description", "subject") for k, _ in header):
        raise ManifestError(
            f"{path}: the DEP-3 header has no Description",
            hint="start the file with 'Description: ...', then Origin, Forwarded, "
            "Applied-Upstream, Last-Update, a line '---', then the diff",
        )
    if not diff_text.strip():
        return PatchFile(path, header, header_text, b"", (), (), (), ())
    files, created, deleted, hunks, executable = cached("patch", diff_text, lambda: _structure(path, diff_text))
    hunks = [Hunk(h[0], h[1], h[2], h[3], h[4], tuple(h[5]), tuple(h[6]), h[7], h[8]) for h in hunks]
    body = diff_text.encode("utf-8")
    return PatchFile(
        path,
        header,
        header_text,
        body,
        tuple(files),
        tuple(created),
        tuple(deleted),
        tuple(hunks),
        tuple(executable),
    )


def _structure(path: Path, diff_text: str) -> list[Any]:
    """[files, created, deleted, hunks, executable] of the diff, as lists (what the parse cache keeps as JSON)."""
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    try:
        ps = PatchSet(diff_text)
    except (UnidiffParseError, ValueError, IndexError) as e:
        raise ManifestError(
            f"{path}: the diff is corrupt: {e}",
            hint=f"regenerate it with `git diff` (or `{prog()} refresh NAME`)",
        ) from e
    if not len(ps):
        raise ManifestError(
            f"{path}: no file diffs found after the header", hint="the diff must start with 'diff --git a/... b/...'"
        )
    files, created, deleted, hunks, executable = [], [], [], [], []
    for pf in ps:
        if pf.is_binary_file:
            raise ManifestError(
                f"{path}: a binary diff ({pf.path}) is not supported",
                hint="carry a binary file as an overlay file instead",
            )
        src, tgt = _strip_prefix(pf.source_file, "a/", path), _strip_prefix(pf.target_file, "b/", path)
        name = tgt or src
        if src and tgt and src != tgt and any(line.startswith("copy from ") for line in pf.patch_info or ()):
            raise ManifestError(  # git diff -C: had been called a rename, with a rename's fix
                f"{path}: copies are not supported ({src} -> {tgt})",
                hint=f"carry the copy as an overlay file ({tgt} under overlay/)",
            )
        if src and tgt and src != tgt:
            raise ManifestError(
                f"{path}: renames are not supported ({src} -> {tgt})",
                hint="express a move as a deletion plus an overlay file",
            )
        if name is None:
            raise ManifestError(f"{path}: a file diff names no path")
        modes = [line.split()[-1] for line in pf.patch_info or () if line.startswith(("old mode ", "new mode "))]
        if len(modes) == 2 and not (pf.is_added_file or pf.is_removed_file):
            # git diff writes a chmod as 'old mode'/'new mode' lines; the tree's files keep their own modes here,
            # so with hunks beside them the mode had been dropped without a word
            only = not len(pf)
            raise ManifestError(
                f"{path}: the diff of {name} changes {'only ' if only else ''}its file mode ({modes[0]} -> "
                f"{modes[1]}{'' if only else ', besides its content'}), which sglang-overlay does not carry",
                hint=f"drop that file's section (from 'diff --git a/{name}' to the next 'diff --git') from the patch"
                if only
                else f"delete the lines 'old mode {modes[0]}' and 'new mode {modes[1]}' from the patch",
            )
        if not len(pf) and not (pf.is_added_file or pf.is_removed_file):
            raise ManifestError(
                f"{path}: the diff of {name} has no valid hunk (a damaged '@@' line?)",
                hint=f"regenerate it with `git diff` (or `{prog()} refresh NAME`)",
            )
        files.append(name)
        if pf.is_added_file:
            created.append(name)
        if pf.is_removed_file:
            deleted.append(name)
        if any(
            line.rstrip("\n") in ("new file mode 100755", "deleted file mode 100755") for line in pf.patch_info or ()
        ):
            executable.append(name)
        for i, h in enumerate(pf, 1):
            removed = [line.value.rstrip("\n") for line in h if line.line_type in (" ", "-")]
            added = [line.value.rstrip("\n") for line in h if line.line_type in (" ", "+")]
            first_change, line_no = h.source_start, h.source_start
            for line in h:
                if line.line_type in ("-", "+"):
                    first_change = max(line_no - (line.line_type == "+"), h.source_start)
                    break
                line_no += 1
            header = f"@@ -{h.source_start},{h.source_length} +{h.target_start},{h.target_length} @@"
            section = (h.section_header or "").strip()
            hunks.append([name, i, h.source_start, h.source_length, header, removed, added, section, first_change])
    return [files, created, deleted, hunks, executable]
