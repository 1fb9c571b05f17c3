"""How a refusal names what its caller gave: the command line's options, or the Python API's arguments.

The commands are callers of api.py, so one refusal serves both; but a caller of `api.apply(patches=...)` never
typed --patches, and a message naming it sent them looking for an option they do not have. The command line's
words are kept exactly (its users and scripts know them); the API's name the function and the argument. The
Context carries the Spelling of whoever made it, and each module that words a refusal asks it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from .errors import writable_copy
from .progname import prog
from .record import Record

# The set grammar's options (patchset.py) and the API's arguments for them.
_API_FORMS = {"--set": "expr=", "--patches": "patches=", "--all": "all=True"}
# The API's argument -> the command line's option, where that is not --the-name.
_OPTIONS = {"expr": "--set"}


class Spelling(Record):
    fn: str | None = None  # the API function that was called ("apply"); None: the command line

    @property
    def cli(self) -> bool:
        return self.fn is None

    # -- any argument ------------------------------------------------------------------------------------------
    def arg(self, name: str) -> str:
        """The API's argument `name` as this caller writes it: --tree or tree=, --set or expr=."""
        if self.fn is None:
            return _OPTIONS.get(name, "--" + name.replace("_", "-"))
        return f"{name}="

    def on(self, name: str) -> str:
        """A flag turned on: --force or force=True."""
        return self.arg(name) if self.fn is None else f"{name}=True"

    def about(self, name: str) -> str:
        """What a refusal of the argument `name` starts with: --tree, or api.status: tree=."""
        return self.arg(name) if self.fn is None else f"api.{self.fn}: {self.arg(name)}"

    def run(self, words: str, call: str, *, pin: bool = True) -> str:
        """A fix to run: the command line's `sglang-overlay WORDS` (quoted as a hint writes it), or the API's call.
        `pin=False`: WORDS name their own pin, or need none (progname.prog)."""
        return f"`{prog(pin=pin)} {words}`" if self.fn is None else call

    def command(self, words: str, manifest: Path, *, pin: bool = True) -> str:
        """A fix the API has no function for (fetch, rebase, a pin other than the manifest's): the command line's
        `sglang-overlay WORDS` as the user typed it; for an API caller, who typed none, with the manifest named, so
        that it acts on the same project from any directory."""
        if self.fn is None:
            return f"`{prog(pin=pin)} {words}`"
        return f"`{prog(project=False, pin=False)} --manifest {shlex.quote(str(manifest))} {words}`"

    @property
    def copy(self) -> str:
        """The fix that works on a writable copy of the tree, naming how a tree is given (errors.writable_copy)."""
        return writable_copy("`--tree DIR`" if self.fn is None else "tree=")

    @property
    def recover(self) -> str:
        """What rolls back a change that stopped half-way (a failed rollback keeps its journal for it). The API has
        no recover(): every call that changes the tree rolls back first."""
        if self.fn is None:
            return f"`{prog()} recover` (or any command that changes the tree)"
        return "the next call that changes the tree (api.apply, api.revert or api.toggle)"

    # -- the set grammar's forms (patchset.py) -----------------------------------------------------------------
    def form(self, flag: str) -> str:
        """A form's name: --set, --patches, --all, or (any other flag: the command's NAME...) NAME."""
        if self.fn is None:
            return flag if flag in _API_FORMS else "NAME"
        return _API_FORMS.get(flag, "names")

    def at(self, flag: str, text: str, *, quote: bool = False) -> str:
        """Where the refused text was written: `--set X` on the command line, `api.apply(expr='X')` in Python."""
        if self.fn is None:
            return f"{flag} {text!r}" if quote else f"{flag} {text}"
        if flag == "--all":
            return f"api.{self.fn}(all=True)"
        arg = _API_FORMS.get(flag, "")  # a command's NAME...: the names, passed one by one
        return f"api.{self.fn}({arg}{text!r})"

    def head(self, flag: str, text: str) -> str:
        """The start of a refusal of the text as a whole (empty, holding an empty name)."""
        return flag if self.fn is None else self.at(flag, text)

    def holding(self, flag: str, text: str) -> str:
        """The start of a refusal of one name in a list."""
        return f"{flag}: {text!r}" if self.fn is None else f"{self.at(flag, text)}:"

    @property
    def empty(self) -> str:  # an empty patch list refused
        if self.fn is None:
            return "--patches: the list is empty (an unset shell variable?)"
        return f"api.{self.fn}: patches= is empty"

    @property
    def name_them(self) -> str:  # the list, as the caller writes one
        return "--patches a,b" if self.fn is None else "patches='a,b'"

    @property
    def revert_all(self) -> str:  # how to take every patch out
        return "revert --all" if self.fn is None else "api.revert(all=True)"

    @property
    def none(self) -> str:  # how to ask for the empty set instead
        return "write --set none" if self.fn is None else "pass expr='none'"


CLI = Spelling()


def api_spelling(fn: str) -> Spelling:
    return Spelling(fn)
