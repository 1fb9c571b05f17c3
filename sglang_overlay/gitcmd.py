"""The one way this tool runs git: a clean environment, and failures that show command, code and stderr."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .errors import OverlayError, os_fix_in
from .interrupts import SIGNALS, Interrupted
from .record import Record


class GitResult(Record):
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"`git {' '.join(self.args)}` exited {self.returncode}: {self.stderr.strip() or self.stdout.strip()}"


def _clean_env(extra: dict[str, str] | None) -> dict[str, str]:
    # Inherited GIT_DIR/GIT_INDEX_FILE (from a hook, say) would point every command at the wrong repository.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.setdefault("LC_ALL", "C")  # git's messages are parsed (offsets, failing hunks)
    env.update(extra or {})
    return env


def _die_with_parent() -> None:
    """In the child: a long git (fetch's commit of the release) outliving a killed tool would go on writing into
    what the next fetch cleans up. Not for every git: it costs a fork instead of a vfork (~6 ms a call here)."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def git(
    *args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None, die_with_parent: bool = False
) -> GitResult:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            env=_clean_env(env),
            preexec_fn=_die_with_parent if die_with_parent and sys.platform == "linux" else None,
        )
    except FileNotFoundError:
        raise OverlayError("git is not installed", hint="install git (apt-get install git)") from None
    # decoded by hand: text=True would translate newlines, and a diff of a line ending in CR would lose the CR
    # (refresh wrote a patch that no longer matched the file it was taken from)
    res = GitResult(tuple(args), proc.returncode, _text(proc.stdout), _text(proc.stderr))
    if proc.returncode < 0:  # git itself was stopped: a Ctrl-C reaches the whole process group
        if -proc.returncode in SIGNALS:
            raise Interrupted(-proc.returncode)
        raise OverlayError(
            f"`git {' '.join(args)}` was killed by {signal.Signals(-proc.returncode).name}",
            hint="run the command again",
        )
    if check and proc.returncode != 0:
        raise OverlayError(res.describe(), hint=os_fix_in(res.stderr, str(cwd)))
    return res


def _text(out: bytes) -> str:
    return out.decode("utf-8", errors="replace")


# A user's or the system's git configuration and attributes must not change what a patch program writes:
# `* eol=crlf` in ~/.config/git/attributes, core.autocrlf or apply.whitespace=error in ~/.gitconfig made
# `git apply` in a scratch directory write CRLF or refuse a diff that applies everywhere else.
_NO_USER_CONFIG = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1"}


def git_outside_repo(*args: str, cwd: Path) -> GitResult:
    """Run git in a scratch directory as a plain patch program: never inside an enclosing repository, and
    blind to the user's and the system's configuration and attributes."""
    env = {"GIT_CEILING_DIRECTORIES": str(Path(cwd).resolve().parent), **_NO_USER_CONFIG}
    # without a global config core.attributesFile falls back to $XDG_CONFIG_HOME/git/attributes
    return git("-c", f"core.attributesFile={os.devnull}", *args, cwd=cwd, check=False, env=env)
