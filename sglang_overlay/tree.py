"""The three kinds of SGLang tree and the mapping from repository paths (python/sglang/...) to files in them.

- checkout:  a git checkout of upstream SGLang; files at python/sglang/...
- installed: an installed package (site-packages); files at sglang/...
- embedded:  the pinned release made by `sglang-overlay fetch` under the project's .sglang/; laid out like a checkout
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from pathlib import Path

from .errors import BadInput, PathEscape, StateError, TreeNotFound, VersionMismatch
from .fsio import is_symlink
from .pathlen import too_long
from .progname import prog
from .record import Record, field
from .repopath import JOURNAL_NAME, STATE_DIR_NAME, STATE_NAME
from .spelling import Spelling
from .state import load_state

TREE_ENV = "SGLANG_OVERLAY_TREE"
EMBEDDED_DIR = ".sglang"


class Tree(Record):
    root: Path
    kind: str  # checkout | installed | embedded
    _checked: set[str] = field(default_factory=set, compare=False, repr=False)  # see path_of

    @property
    def package_dir(self) -> Path:
        return self.path_of("python/sglang")

    @property
    def state_dir(self) -> Path:
        # An installed tree keeps its state inside the package, not loose in site-packages.
        return (self.package_dir if self.kind == "installed" else self.root) / STATE_DIR_NAME

    @property
    def is_git(self) -> bool:
        return self.kind in ("checkout", "embedded")

    @property
    def python_path(self) -> Path:
        """The directory to put first on sys.path so that `import sglang` imports this tree."""
        return self.root if self.kind == "installed" else self.root / "python"

    def path_of(self, repo_path: str) -> Path:
        """Where a repository path lives in this tree, refusing anything that would leave it."""
        return self.walk(repo_path)[0]

    def walk(self, repo_path: str) -> tuple[Path, os.stat_result | None]:
        """path_of, and what is at the path (lstat; None: nothing)."""
        rel = repo_path[len("python/") :] if self.kind == "installed" else repo_path
        if self.kind == "installed" and not repo_path.startswith("python/"):
            raise PathEscape(f"{repo_path} has no place in an installed package tree")
        # A symlinked directory inside the tree could redirect a write anywhere on the machine. Each directory
        # is looked at once until forget_checks() (a commit looks again), the last part every time.
        parts = rel.split("/")
        last = len(parts) - 1
        probe = os.fspath(self.root)
        found = None
        for i, part in enumerate(parts):
            probe = os.path.join(probe, part)
            if i < last and probe in self._checked:
                continue
            try:
                st = os.lstat(probe)
            except (FileNotFoundError, NotADirectoryError):
                break  # nothing below it exists either
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = Path(probe).resolve(strict=False)
                except (RuntimeError, OSError):  # a loop (3.11 raises RuntimeError, 3.13 OSError)
                    raise PathEscape(
                        f"{probe} is a symbolic link that loops back on itself",
                        hint=f"replace it with the directory or file it stands for (rm {shlex.quote(probe)}, "
                        "then put that back)",
                    ) from None
                if not _is_within(target, self.root.resolve()):
                    # a copy, not the link removed: a directory moved out and linked holds the tree's files
                    raise PathEscape(
                        f"{probe} is a symbolic link to {target}, outside the tree {self.root}",
                        hint="replace the link with a copy of what it points to: "
                        f"rm {shlex.quote(probe)} && cp -a {shlex.quote(str(target))} {shlex.quote(probe)}",
                    )
            if i == last:
                found = st
            elif not stat.S_ISLNK(st.st_mode):
                self._checked.add(probe)
        return self.root / rel, found

    def forget_checks(self) -> None:
        """Look at every directory again (a commit does, just before it writes)."""
        self._checked.clear()

    def managed_file(self, repo_path: str) -> Path:
        """path_of for a file the tool replaces: it must be a regular file (or absent), never a link or a directory."""
        path, st = self.walk(repo_path)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise BadInput(
                f"{path} is a symbolic link: sglang-overlay replaces the files it patches, which would turn "
                f"the link into a regular file",
                hint="replace the link with a copy of the file it points to",
            )
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise BadInput(
                f"{path} is not a regular file, but a patch writes a file there",
                hint="move it out of the way, or leave that patch off",
            )
        return path

    def checked_state_dir(self) -> Path:
        """The state directory, refusing one that is a symlink (it would put state, saved copies and the lock
        anywhere on the machine) or not a directory."""
        sd = self.state_dir
        if is_symlink(sd):
            raise own_dir_link(sd)
        if sd.exists() and not sd.is_dir():
            raise StateError(f"{sd} is not a directory", hint=f"move it aside (mv {sd} {sd}.bad)")
        return sd

    def version(self) -> str | None:
        gen = self.path_of("python/sglang/_version.py")
        if gen.is_file():
            m = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", _text(gen))
            if m:
                return m.group(1)
        if self.kind == "installed":
            for meta in self.root.glob("sglang-*.dist-info/METADATA"):
                m = re.search(r"^Version:\s*(\S+)", _text(meta), re.M)
                if m:
                    return m.group(1)
        if self.is_git:
            from .gitcmd import git  # a last resort: subprocess costs `status` more than the rest of it

            res = git("describe", "--tags", "--abbrev=0", cwd=self.root, check=False)
            if res.returncode == 0:
                return res.stdout.strip().lstrip("v")
        return None

    def check_version(self, expected: str) -> None:
        found = self.version()
        if found is None:
            raise VersionMismatch(
                f"{self.root}: cannot tell which SGLang version this tree holds "
                f"(no python/sglang/_version.py, no dist-info, no tag); the manifest pins {expected}",
                hint=f"use the pinned release (`{prog()} fetch`) or check out tag v{expected}",
            )
        if found != expected:
            raise VersionMismatch(
                f"{self.root}: this tree is SGLang {found}, the manifest pins {expected}",
                hint=f"use a {expected} tree (`{prog()} fetch` makes one), or run "
                f"`{prog()} check --against {found}` to see which patches survive",
            )


def _text(path: Path) -> str:
    """A version file's text; undecodable bytes or an unreadable file are not a version, not a crash."""
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def classify(path: Path, project_root: Path, spelling: Spelling) -> Tree:
    path = path.resolve()
    if (path / "python" / "sglang" / "__init__.py").is_file():
        embedded = _is_within(path, (project_root / EMBEDDED_DIR).resolve())
        return Tree(path, "embedded" if embedded else "checkout")
    if (path / "sglang" / "__init__.py").is_file():
        return _not_inside_a_checkout(Tree(path, "installed"), spelling)
    if path.name == "sglang" and (path / "__init__.py").is_file():
        return _not_inside_a_checkout(Tree(path.parent, "installed"), spelling)
    raise TreeNotFound(
        f"{path}: not an SGLang tree (expected python/sglang/ for a checkout, or sglang/ for an installed package)",
        hint=f"pass {spelling.arg('tree')} pointing at the repository root or at site-packages",
    )


def _not_inside_a_checkout(tree: Tree, spelling: Spelling) -> Tree:
    """`--tree REPO/python` read as a package would keep a second state for the checkout's files: each address
    then took the other's patches for hand edits (apply through one was "does not apply cleanly" after the other).
    Refused whatever is there: a state directory under python/ had let it through, a leftover or a hand-made
    one included. One that carries patches (an earlier sglang-overlay accepted the address) is named, with the
    move that hands those patches to the checkout's own address."""
    repo = tree.root.parent
    if tree.root.name != "python" or not (repo / ".git").exists():
        return tree
    problem = f"{tree.root}: is the python/ directory of the checkout {repo}, not a tree of its own"
    here, root = tree.state_dir, Tree(repo, "checkout").state_dir
    here_carries = carried(here)
    if here_carries is None:
        leftover = f"; {here} carries no patch (a leftover): remove it (rm -r {here})" if os.path.lexists(here) else ""
        again = f"--tree {repo}" if spelling.cli else f"tree={str(repo)!r}"
        raise TreeNotFound(problem, hint=f"pass {again}{leftover}")
    at_root = carried(root)
    move = f"mv {here} {root}" if not os.path.lexists(root) else f"rm -r {root} && mv {here} {root}"
    on_repo = f"tree={str(repo)!r}"
    first = (
        f"the checkout's own state {root} carries {', '.join(at_root)} too: take those out first "
        f"({spelling.run(f'--tree {repo} revert --all', f'api.revert(all=True, {on_repo})')}), then "
        if at_root
        else ""
    )
    if spelling.cli:
        after = f"use --tree {repo} (`{prog()} --tree {repo} status` shows those patches; `revert --all` there takes "
    else:
        after = f"pass {on_repo} (api.status({on_repo}) shows those patches; api.revert(all=True, {on_repo}) takes "
    raise TreeNotFound(
        f"{problem}; {here} holds what was applied through this address (by an earlier sglang-overlay, which "
        f"accepted it): {', '.join(here_carries)}",
        hint=f"{first}hand that state to the checkout: `{move}`, then {after}them out)",
    )


def own_dir_link(path: Path) -> StateError:
    """A link where the tool keeps a directory of its own (the state, saved copies, backups) is refused. The fix
    moves the linked directory back: removing the link would lose what it holds (a journal, copies, edits)."""
    target = os.path.realpath(path)
    try:
        holds = os.path.isdir(target) and bool(os.listdir(target))
    except OSError:
        holds = True  # cannot tell: the move keeps it either way
    q = shlex.quote
    hint = (
        f"put the directory back in place of the link: rm {q(str(path))} && mv {q(target)} {q(str(path))}"
        if holds
        else f"remove the link (rm {q(str(path))}); the next command makes a real directory"
    )
    return StateError(
        f"{path} is a symbolic link (to {target}): sglang-overlay keeps a tree's state inside the tree", hint=hint
    )


def carried(state_dir: Path) -> list[str] | None:
    """What a state directory carries: its applied patches, an interrupted command; None if nothing."""
    if os.path.lexists(state_dir / JOURNAL_NAME):
        return ["an interrupted command's journal"]
    try:
        state = load_state(state_dir / STATE_NAME)
    except StateError as e:
        return [f"a state file that cannot be read ({e})"]
    return list(state.applied) or (["files it manages"] if state.files else None)


def embedded_path(project_root: Path, version: str) -> Path:
    return project_root / EMBEDDED_DIR / f"sglang-{version}"


def locate(explicit: str | None, env: str | None, project_root: Path, version: str, spelling: Spelling) -> Tree:
    """--tree, then $SGLANG_OVERLAY_TREE (`env`: its value when the Context was made), then the embedded default;
    never a guess at site-packages. `spelling`: the caller's word for --tree (the API's tree=)."""
    if explicit is not None and not explicit.strip():
        raise TreeNotFound(
            f"{spelling.about('tree')} is empty (an unset shell variable?)",
            hint=f"pass the tree's directory, or leave {spelling.arg('tree')} out to use the embedded tree",
        )
    if explicit is None and env is not None and not env.strip():  # as `--tree ""` is: never the embedded tree
        raise TreeNotFound(
            f"{TREE_ENV} is set but empty (an unset shell variable?)",
            hint=f"set {TREE_ENV} to the tree's directory, or unset it to use the embedded tree",
        )
    chosen = explicit or env
    if chosen and not explicit and too_long(chosen):
        raise TreeNotFound(f"{TREE_ENV}: {too_long(chosen)}", hint=f"set {TREE_ENV} to the tree's directory")
    if chosen:
        try:
            p = Path(chosen).expanduser()
        except RuntimeError as e:  # ~user with no such user, or ~ with no home: pathlib's words, not a crash
            where = spelling.arg("tree") if explicit else TREE_ENV
            raise TreeNotFound(
                f"{where} {chosen}: the ~ cannot be expanded ({e})", hint=f"give {where} as an absolute path"
            ) from None
        if not p.exists():
            raise TreeNotFound(f"{p}: no such directory (from {spelling.arg('tree') if explicit else TREE_ENV})")
        return classify(p, project_root, spelling)
    default = embedded_path(project_root, version)
    if (default / "python" / "sglang").is_dir():
        return Tree(default.resolve(), "embedded")
    raise TreeNotFound(
        f"no SGLang tree: {default} does not exist yet",
        hint=f"run `{prog()} fetch` to make the pinned tree, or pass {'--tree DIR' if spelling.cli else 'tree='} "
        f"(or set {TREE_ENV}) for your own checkout or site-packages",
    )
