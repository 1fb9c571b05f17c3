"""Every change to a tree goes through one Transaction: all of it lands, or none of it, also across a kill -9.

Protocol: (1) a journal with every touched file's pre-image and the old state is written beside the state and
renamed into place (the commit point of the journal); (2) files are replaced atomically one by one; (3) the new
state is written atomically; (4) the journal is removed. Any command first calls `recover`, which rolls an
unfinished transaction back from its journal, so a kill at any step leaves the tree as it was before.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

from .errors import OverlayError
from .gitcmd import git
from .state import State, atomic_write, load_state
from .tree import STATE_DIR_NAME, Tree

KILL_ENV = "SGLANG_OVERLAY_KILL_AT"  # tests: "STEP:N" sends SIGKILL to this process at the N-th STEP


def _maybe_die(step: str, count: int) -> None:
    spec = os.environ.get(KILL_ENV)
    if spec and spec == f"{step}:{count}":
        os.kill(os.getpid(), signal.SIGKILL)


class Transaction:
    def __init__(self, tree: Tree):
        self.tree = tree
        self.dir = tree.state_dir
        self.state_path = self.dir / "state.json"
        self.journal = self.dir / "journal"
        self.journal_tmp = self.dir / "journal.tmp"

    @contextmanager
    def locked(self):
        """One writer per tree: a second command waits rather than interleaving its writes."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._exclude_from_git()
        with open(self.dir / "lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"sglang-overlay: waiting for another command on {self.tree.root} ...", file=sys.stderr)
                fcntl.flock(fh, fcntl.LOCK_EX)
            self.recover()
            yield self

    def _exclude_from_git(self) -> None:
        if not self.tree.is_git:
            return
        res = git("rev-parse", "--git-path", "info/exclude", cwd=self.tree.root, check=False)
        if res.returncode != 0:
            return
        exclude = (self.tree.root / res.stdout.strip()).resolve()
        line = f"/{STATE_DIR_NAME}/"
        text = exclude.read_text() if exclude.exists() else ""
        if line not in text.splitlines():
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with open(exclude, "a") as f:
                f.write(("" if text.endswith("\n") or not text else "\n") + line + "\n")

    def state(self) -> State:
        return load_state(self.state_path)

    def recover(self) -> bool:
        """Roll back an interrupted transaction. Returns True if there was one."""
        if self.journal_tmp.exists():
            # The journal never reached its commit point, so no file of the tree was written yet.
            shutil.rmtree(self.journal_tmp)
        if not self.journal.exists():
            return False
        meta = json.loads((self.journal / "journal.json").read_text())
        for i, entry in enumerate(meta["files"]):
            path = self.tree.path_of(entry["path"])
            if entry["existed"]:
                atomic_write(path, (self.journal / "pre" / str(i)).read_bytes(), entry["mode"])
            elif path.exists():
                path.unlink()
                _remove_empty_parents(path.parent, self.tree.package_dir)
        old_state = self.journal / "state.json.old"
        if old_state.exists():
            atomic_write(self.state_path, old_state.read_bytes())
        elif self.state_path.exists():
            self.state_path.unlink()
        shutil.rmtree(self.journal)
        print(f"sglang-overlay: recovered from an interrupted `{meta['op']}` (pid {meta['pid']}): "
              f"rolled back {len(meta['files'])} file(s) in {self.tree.root}", file=sys.stderr)
        return True

    def commit(self, op: str, writes: dict[str, bytes | None], new_state: State) -> None:
        """Replace the given files (None removes one) and the state, atomically as a whole."""
        if self.journal.exists():
            raise OverlayError(f"{self.journal}: a journal is still there", hint="internal: recover() was not called")
        self.journal_tmp.mkdir(parents=True)
        (self.journal_tmp / "pre").mkdir()
        entries = []
        for i, (repo_path, _) in enumerate(sorted(writes.items())):
            path = self.tree.path_of(repo_path)
            existed = path.is_file()
            mode = None
            if existed:
                shutil.copyfile(path, self.journal_tmp / "pre" / str(i))
                mode = path.stat().st_mode & 0o7777
            entries.append({"path": repo_path, "existed": existed, "mode": mode})
        if self.state_path.exists():
            shutil.copyfile(self.state_path, self.journal_tmp / "state.json.old")
        atomic_write(self.journal_tmp / "journal.json",
                     json.dumps({"op": op, "pid": os.getpid(), "files": entries}).encode())
        os.rename(self.journal_tmp, self.journal)
        _maybe_die("journal", 1)

        for n, entry in enumerate(entries, 1):
            path = self.tree.path_of(entry["path"])
            data = writes[entry["path"]]
            if data is None:
                if path.exists():
                    path.unlink()
                    _remove_empty_parents(path.parent, self.tree.package_dir)
            else:
                atomic_write(path, data, entry["mode"] if entry["mode"] is not None else 0o644)
            _maybe_die("write", n)

        atomic_write(self.state_path, new_state.to_json().encode())
        _maybe_die("state", 1)
        shutil.rmtree(self.journal)


def _remove_empty_parents(directory: Path, stop: Path) -> None:
    # Upstream trees hold no empty directories; leaving one behind would make revert not byte-identical.
    directory, stop = directory.resolve(), stop.resolve()
    while directory != stop and stop in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent
