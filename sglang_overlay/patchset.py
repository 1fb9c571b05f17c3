"""The one grammar for naming a patch set, shared by every command, the Python API and the bench.

On the command line:
  NAME...           these patches (each may be a comma list: `deepseek_v2,oea_topk`)
  --all             every patch of the manifest
  --patches A,B     exactly these patches (never empty: that is `--set none`)
  --set EXPR        a set expression:
      full                    a preset of the manifest
      deepseek_v2,oea_topk    a list of patches (and presets: their members)
      full-oea_topk           a preset minus a patch (or minus a preset's members); `full-a-b` minus two
      base+eagle_profiling    plus a patch; `base+oea_topk,eagle_profiling` plus two
      none                    the empty set (the pristine tree; `pristine` says the same)
Patch and preset names are [a-z][a-z0-9_]*, so '+', '-' and ',' cannot occur in them. A resolved set is closed
over `requires` and put in manifest order; a patch taken out with '-' that a member requires is refused rather
than quietly put back. Every error is exit 2 and names the token and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .errors import ManifestError, PatchSetError
from .manifest import EMPTY_NAMES, Manifest
from .record import Record
from .spelling import CLI, Spelling

_TERM_RE = re.compile(r"([+-]?)([^+-]+)")
FORMS = "PRESET, a,b, PRESET+x, PRESET-x or none"


class PatchSet(Record):
    expr: str  # as written (for --all: "all")
    patches: tuple[str, ...]  # closed over requires, in manifest order (unclosed for a `members` resolve)
    preset: str | None = None  # set when expr is exactly a preset name

    def launch_flags(self) -> list[str]:
        """The `launch` options that carry exactly this set."""
        if self.preset is not None:
            return ["--set", self.preset]
        if not self.patches:
            return ["--set", "none"]  # an empty --patches is refused as a likely unset shell variable
        return ["--patches", ",".join(self.patches)]

    @property
    def label(self) -> str:
        return ",".join(self.patches) if self.patches else "(none)"


def _one_of(sp: Spelling) -> str:
    """The forms that name a set, for a refusal of two or of none."""
    if sp.cli:
        return f"one of NAME..., --all, --set {FORMS}"
    return f"one of names, all=True, expr= ({FORMS}), patches='a,b'"


def _unknown(m: Manifest, flag: str, expr: str, name: str, sp: Spelling) -> PatchSetError:
    import difflib  # only for a message (as in manifest.py)

    close = difflib.get_close_matches(name, list(m.names) + list(m.presets), n=1)
    mean = f" (did you mean {close[0]!r}?)" if close else ""
    return PatchSetError(
        f"{sp.at(flag, expr)}: {name!r} is neither a patch nor a preset of {m.path}{mean}",
        hint=f"patches: {', '.join(m.names) or '(none)'}; presets: {', '.join(sorted(m.presets)) or '(none)'}",
    )


def _members(m: Manifest, flag: str, expr: str, term: str, sp: Spelling) -> list[str]:
    out: list[str] = []
    for raw in term.split(","):
        name = raw.strip()
        if not name:
            raise PatchSetError(
                f"{sp.at(flag, expr, quote=True)}: an empty name (a stray ',' or an unset shell variable?)",
                hint=f"write {FORMS}",
            )
        if name in EMPTY_NAMES:
            continue
        if name in m.presets:
            if name in m.names:
                raise PatchSetError(
                    f"{sp.at(flag, expr)}: {name!r} is both a preset and a patch of {m.path}",
                    hint="rename the preset or the patch in the manifest",
                )
            out.extend(m.presets[name])
        elif name in m.names:
            out.append(name)
        else:
            raise _unknown(m, flag, expr, name, sp)
    return out


def _closure(m: Manifest, flag: str, expr: str, names: Iterable[str], sp: Spelling) -> tuple[str, ...]:
    try:
        return m.closure(names)
    except ManifestError as e:  # a conflicting pair
        raise PatchSetError(f"{sp.at(flag, expr)}: {e}", hint=e.hint) from None


def resolve(m: Manifest, expr: str, *, flag: str = "--set", close: bool = True, spelling: Spelling = CLI) -> PatchSet:
    """An expression of the grammar above. `close=False`: the members as named (for `revert`/`apply NAME`),
    validated, without adding what they require. `flag`: the command line's form it came in (spelling: as the
    caller wrote it)."""
    sp = spelling
    text = expr.strip()
    if not text:
        raise PatchSetError(
            f"{sp.head(flag, expr)}: the set is empty (an unset shell variable?)",
            hint=f"write {FORMS} (none: the pristine tree)",
        )
    if text in m.presets and text not in m.names:
        listed = tuple(m.presets[text])
        return PatchSet(text, _closure(m, flag, text, listed, sp) if close else listed, preset=text)
    terms = _TERM_RE.findall(text)
    if "".join(op + t for op, t in terms) != text or terms[0][0]:
        raise PatchSetError(f"{sp.at(flag, text, quote=True)}: cannot parse it", hint=f"write {FORMS}")
    chosen: list[str] = []
    removed: set[str] = set()
    for op, term in terms:
        members = _members(m, flag, text, term, sp)
        if op == "-":
            missing = [x for x in members if x not in chosen]
            if missing:
                raise PatchSetError(
                    f"{sp.at(flag, text)}: cannot take out {', '.join(missing)}: not in the set so far",
                    hint="take out only what the preset or list before it holds",
                )
            chosen = [c for c in chosen if c not in members]
            removed.update(members)
        else:
            chosen.extend(x for x in members if x not in chosen)
            removed.difference_update(members)  # taken out, then named again: it is in
    if not close and not removed:
        return PatchSet(text, tuple(chosen))
    # checked with close=False too: `apply --set E` closes the set later, and would put back what E takes out
    patches = _closure(m, flag, text, chosen, sp)
    back = [p for p in patches if p in removed]
    if back:
        needs = sorted({q for q in patches if set(m.patch(q).requires) & set(back)})
        raise PatchSetError(
            f"{sp.at(flag, text)}: {', '.join(back)} cannot be left out: it is required by {', '.join(needs)}",
            hint=f"take out {', '.join(needs)} too",
        )
    return PatchSet(text, patches if close else tuple(chosen))


def from_options(
    m: Manifest,
    *,
    names: Iterable[str] = (),
    all: bool = False,
    preset: str | None = None,
    patches: str | None = None,
    verb: str,
    close: bool = True,
    spelling: Spelling = CLI,
) -> PatchSet | None:
    """The command-line forms (NAME..., --all, --set EXPR, --patches A,B): at most one; None when none is given."""
    names = tuple(names)
    given = [
        f
        for f, on in (
            (verb, names),
            ("--all", all),
            ("--set", preset is not None),
            ("--patches", patches is not None),
        )
        if on
    ]
    if len(given) > 1:
        said = " and ".join(spelling.form(f) for f in given)
        head = verb if spelling.cli else f"api.{spelling.fn}"
        raise PatchSetError(f"{head}: {said} both name a set: give one", hint=_one_of(spelling))
    if all:
        return PatchSet("all", _closure(m, "--all", "", m.names, spelling) if close else m.names)
    if preset is not None:
        return resolve(m, preset, flag="--set", close=close, spelling=spelling)
    if patches is not None:
        if not patches.strip():
            # `--patches "$P"` with P unset: taken as the empty set, `apply` reverted every patch
            out = f"; to take every patch out of the tree: {spelling.revert_all}" if verb == "apply" else ""
            raise PatchSetError(
                spelling.empty, hint=f"name the patches ({spelling.name_them}); for the empty set {spelling.none}{out}"
            )
        listed = _only_names(m, "--patches", patches, spelling)
        return resolve(m, listed, flag="--patches", close=close, spelling=spelling)
    if names:
        return resolve(m, _only_names(m, verb, ",".join(names), spelling), flag=verb, close=close, spelling=spelling)
    return None


def _only_names(m: Manifest, flag: str, text: str, sp: Spelling) -> str:
    """--patches and NAME... take patch names only; the expression forms belong to --set."""
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            raise PatchSetError(
                f"{sp.holding(flag, text)} holds an empty patch name (an unset shell variable?)",
                hint="name the patches, e.g. deepseek_v2,oea_topk",
            )
        if name not in m.names and (name in m.presets or name in EMPTY_NAMES or re.search(r"[+-]", name)):
            raise PatchSetError(
                f"{sp.at(flag, text)}: {name!r} is not a patch name",
                hint=f"name patches here; a preset or an expression goes to {sp.form('--set')} ({FORMS})",
            )
        if name not in m.names:
            import difflib

            close = difflib.get_close_matches(name, list(m.names), n=1)
            raise PatchSetError(
                f"{sp.at(flag, text)}: no patch named {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
                hint=f"patches: {', '.join(m.names) or '(none)'}",
            )
    return text
