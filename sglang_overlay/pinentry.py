"""What an entry of pins/ is: a pin, no pin (a dot-name, a README), or refused by name with the fix. The one
judgement `check --all-pins`, `--pin VERSION` and `rebase VERSION` share: an entry that one of them left out and
another refused let CI pass a pin the other commands reject (or never check a set the user edits)."""

from __future__ import annotations

import errno
import os
import shlex
import stat
from pathlib import Path
from typing import Literal

from .errors import BadInput, os_fix_in
from .manifest import Manifest
from .progname import prog
from .rebase_state import PINS_DIR, VERSION_RE
from .record import Record


def pin_entries(top: Manifest) -> list[Path]:
    """The entries of pins/ that are pins or meant as one, usable or not. A dot-name is the tool's own (a rebase's
    staging and progress, a copy set aside) or the user's way to keep one aside; a file (or a link to one) is no
    pin (a README) unless it is named after a release; a directory or a link to nothing is meant as a pin."""
    folder = top.project_root / PINS_DIR
    _refuse_folder(folder)
    return [
        folder / n
        for n in sorted(readable_names(folder))
        if not n.startswith(".") and (VERSION_RE.fullmatch(n) or not _is_file(folder / n, follow=True))
    ]


def readable_names(folder: Path) -> list[str]:
    """The names in pins/, none if it is no directory. One this user cannot list or search is refused by name: read
    as empty, it had held no pin and no rebase in progress while it did. Said of pins/ itself, not of the first
    entry looked into, when it can be listed but not searched."""
    if not folder.is_dir():
        return []
    try:
        names = os.listdir(folder)
    except PermissionError as e:
        raise _unreadable(folder, e) from e
    for n in names:
        _lexists(folder / n)
    return names


def refuse_entry(top: Manifest, version: str) -> None:
    """`--pin VERSION` and `rebase VERSION`: refuse pins/VERSION as `check --all-pins` does, if it is there."""
    d = top.project_root / PINS_DIR / version
    _refuse_folder(d.parent)
    problem = entry_problem(top, d) if _lexists(d) else None
    if problem is not None:
        raise problem


LinkFault = Literal["loop", "missing", "denied"]


class BrokenLink(Record):
    """A symbolic link that leads nowhere this user can go."""

    target: str  # where it leads: the path its text names, resolved as far as it goes
    why: LinkFault

    @property
    def said(self) -> str:
        """What the link is, after "PATH is"."""
        if self.why == "loop":
            return "a symbolic link loop"  # no target to name or restore
        if self.why == "denied":  # it may well be there: "does not exist" had sent the user to restore it
            return f"a symbolic link to {self.target}, which this user cannot reach (Permission denied)"
        return f"a symbolic link to {self.target}, which does not exist"

    @property
    def reach(self) -> str:
        """The fix when it is denied: which directory on the way refuses is not said by the error."""
        return f"let this user reach it (`namei -l {shlex.quote(self.target)}` shows each directory on the way)"


def broken_link(path: Path) -> BrokenLink | None:
    """How a link at `path` leads nowhere this user can go, or None."""
    if not os.path.islink(path):
        return None
    try:
        os.stat(path)
    except OSError as e:
        why: LinkFault = "loop" if e.errno == errno.ELOOP else "denied" if e.errno == errno.EACCES else "missing"
        return BrokenLink(os.path.realpath(path), why)
    return None


def _refuse_folder(folder: Path) -> None:
    """pins is no directory: `check --all-pins` found no pins in it and passed, `--pin` offered a rebase, and the
    rebase fetched the release before it failed to make its staging directory there."""
    if os.path.isdir(folder) or not os.path.lexists(folder):
        return
    link = broken_link(folder)
    q = shlex.quote(str(folder))
    if link is not None and link.why == "denied":  # no reason to think it is no directory
        raise BadInput(
            f"{folder} is {link.said}: the pins of this project are read from it",
            hint=f"{link.reach}, or run as a user who may; or remove the link (`rm {q}`)",
        )
    if link is not None:
        what = link.said
    elif os.path.islink(folder):
        what = f"a symbolic link to {os.path.realpath(folder)}, a file"
    else:
        what = "a file"
    raise BadInput(
        f"{folder} is {what}, not the directory of this project's pins (each pin is {folder}/VERSION/)",
        hint=(
            f"{'point it at a directory' if link.why == 'loop' else 'restore what it leads to'}, or remove the link "
            f"(`rm {q}`)"
            if link
            else f"remove it (`rm {q}`) or rename it (`mv {q} {q}.txt`); a file that holds a path is what git checks "
            "out for a symbolic link with `core.symlinks` off"
        )
        + f"; `{prog(pin=False)} rebase VERSION` makes the directory",
    )


def name_problem(top: Manifest, d: Path) -> BadInput | None:
    """Why no pin can go by the name of the entry `d` (it names no release, or the top level's), or None."""
    if d.name == top.pin.version:
        return _shadows(top, d)
    if not VERSION_RE.fullmatch(d.name):
        return _misnamed(d)
    return None


def entry_problem(top: Manifest, d: Path) -> BadInput | None:
    """Why the entry `d` of pins/ cannot be used as a pin, or None."""
    named = name_problem(top, d)
    if named is not None:
        return named
    _lexists(d)  # a pins/ that cannot be searched is named as such, not the pin in it
    if os.path.exists(d) and not os.path.isdir(d):
        return _a_file(d)
    if not _is_file(d / "manifest.yaml", follow=True):
        return _no_manifest(d)
    return None


def _lexists(path: Path) -> bool:
    """os.path.lexists, except that a directory on the way that cannot be searched is said: lexists answers False
    there, and the read after it failed far from the cause (a "damaged" rebase progress file, a "missing" pin)."""
    return _is_file(path, follow=False) is not None


def _is_file(path: Path, *, follow: bool) -> bool | None:
    """Whether `path` is a file (None: there is nothing there, or a loop); its directory refused if unreadable."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except PermissionError as e:
        link = broken_link(path) if follow and _lstat_ok(path) else None
        if link is not None:  # the link's own directory is readable: its target is what this user cannot reach
            raise BadInput(
                f"{path} is {link.said}: the pins of this project are read through it",
                hint=f"{link.reach}, or run as a user who may",
            ) from e
        raise _unreadable(path.parent, e) from e
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise
    return stat.S_ISREG(st.st_mode)


def _lstat_ok(path: Path) -> bool:
    try:
        os.lstat(path)
    except OSError:
        return False
    return True


def _unreadable(d: Path, err: OSError) -> BadInput:
    """Not a failed write (exit 1, "no change to the tree is in progress"): the project cannot be read as given."""
    return BadInput(
        f"{d} cannot be read ({err.strerror}): the pins of this project are read from it",
        hint=os_fix_in(err.strerror or "", str(d)) or f"fix its permissions (`ls -ld {shlex.quote(str(d))}`)",
    )


def _shadows(top: Manifest, d: Path) -> BadInput:
    """`--pin V` and `check --all-pins` take the top level for its own release, so a set here was never used or
    checked: edits made in it (a copy made to try something) would be lost without a word."""
    v = top.pin.version
    return BadInput(
        f"{d} is named for {v}, the release the top-level manifest {top.path} pins: it would shadow the top-level "
        f"set (`--pin {v}` and `check --all-pins` take the top level for {v}, so this would never be used or checked)",
        hint=f"remove it (`rm -r {shlex.quote(str(d))}`); or, if it holds the set you mean for {v}, move that set "
        f"to the top level (its manifest.yaml, patches/ and overlay/ in place of those in {top.project_root}) and "
        "remove it; or rename it to a name that starts with '.' to keep it aside",
    )


def _misnamed(d: Path) -> BadInput:
    """The name is what `--pin` and the checks go by: one that is no release can never be selected, and its set
    (whatever it holds) would be checked as the release of no name. Quoted: a trailing space is unseen otherwise."""
    return BadInput(
        f"{d}: the name {d.name!r} is not a release version: each directory in {d.parent} whose name does not start "
        "with '.' is the pin of the release it names",
        hint=f"rename it to the release its set is for (`mv {shlex.quote(str(d))} "
        f"{shlex.quote(str(d.parent))}/VERSION`), or to a name that starts with '.' to keep it aside",
    )


def _a_file(d: Path) -> BadInput:
    """Named after a release, so meant as its pin (a README beside the pins is no release's name)."""
    link = f" (a symbolic link to {os.path.realpath(d)})" if os.path.islink(d) else ""
    return BadInput(
        f"{d} is a file, not a pin directory{link}: each entry of {d.parent} whose name does not start with '.' "
        "and names a release is that release's pin, a directory (manifest.yaml, patches/, overlay/)",
        hint=f"remove it (`rm {shlex.quote(str(d))}`; `{prog(pin=False)} rebase {d.name}` makes the pin) or rename "
        "it to a name that starts with '.'",
    )


def _no_manifest(d: Path) -> BadInput:
    """pins/VERSION holds no manifest.yaml (deleted, misnamed, a link to nothing): it cannot be used, and leaving
    it out would let CI pass without the pin it was meant to check."""
    link = broken_link(d)
    gone = f" ({link.said})" if link else ""
    fix = (
        "point it at a pin directory (it leads to itself)"
        if link and link.why == "loop"
        else link.reach
        if link and link.why == "denied"
        else "restore what it leads to (a pin directory with its manifest.yaml)"
        if link
        else "add its manifest.yaml (a pin is a whole project directory: manifest.yaml, patches/, overlay/)"
    )
    return BadInput(
        f"{d} has no manifest.yaml{gone}: each directory in {d.parent} whose name does not start with '.' is the "
        "pin of the release it names",
        hint=f"{fix}; or take it out of the pins: remove it (`rm -r {shlex.quote(str(d))}`; `{prog(pin=False)} "
        f"rebase {d.name}` makes the pin again) or rename it to a name that starts with '.'",
    )
