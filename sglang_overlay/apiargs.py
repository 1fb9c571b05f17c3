"""The Python API's arguments, checked where they come in (api.py): a wrong type is a usage error (BadInput, exit 2)
naming the function, the argument and what it takes. Unchecked, a wrong type failed deep inside as a TypeError or
AttributeError that named neither (a list of names at str.join, patches=[...] at .strip()), or passed as something
else: manifest=5 named a file "5", and all="no" is true."""

from __future__ import annotations

import os

from .context import Context
from .errors import BadInput

_PATH_EXAMPLES = {"project": "path/to/project", "manifest": "path/to/manifest.yaml", "tree": "path/to/sglang"}
_TEXTS = {  # what each str argument holds, and an example of it
    "expr": ("a preset or a set expression", "default"),
    "patches": ("patch names separated by commas", "deepseek_v2,oea_topk"),
    "env_profile": ("the name of one of the manifest's env profiles", "nccl_pcie"),
    "name": ("one patch name", "deepseek_v2"),
}


def _shown(value: object) -> str:
    if value is None:
        return "None"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _str_list(value: object) -> list[str] | None:
    """The names in a list, tuple or set of str: what a caller most likely meant to pass one by one or joined."""
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    return None


def path(fn: str, arg: str, value: object) -> None:
    """None, a str, or an os.PathLike whose path is a str (what pathlib and the tree's messages handle)."""
    if value is None or isinstance(value, str):
        return
    named = _fspath(value)
    if isinstance(named, str):
        return
    fix = f"decode it: {arg}=os.fsdecode(...)" if isinstance(named, bytes) else f"e.g. {arg}={_PATH_EXAMPLES[arg]!r}"
    raise BadInput(f"api.{fn}: {arg}= takes a path (a str or a pathlib.Path), not {_shown(value)}", hint=fix)


def _fspath(value: object) -> object:
    """What os.fspath makes of `value`: a str, bytes, or None for what is no path (its __fspath__ included)."""
    try:
        return os.fspath(value)  # type: ignore[call-overload]
    except TypeError:
        return None


def text(fn: str, arg: str, value: object) -> None:
    """None (left out) or a str."""
    if value is not None:
        _str(fn, arg, value)


def name(fn: str, value: object) -> None:
    """The one patch name that toggle and Status.patch take: None is no name here."""
    _str(fn, "name", value)


def _str(fn: str, arg: str, value: object) -> None:
    if isinstance(value, str):
        return
    what, example = _TEXTS[arg]
    listed = _str_list(value)
    if listed is not None and arg == "name":
        fix = "it takes one name: for several, call it once per name"
    elif listed is not None and arg in ("expr", "patches"):
        fix = f"join the names with commas: {arg}={','.join(listed)!r}"
    else:
        fix = f"e.g. {arg}={example!r}"
    raise BadInput(f"api.{fn}: {arg}= takes a str ({what}), not {_shown(value)}", hint=fix)


def names(fn: str, values: tuple[object, ...]) -> None:
    """Patch names passed one per positional argument, each a str (a comma list in one str is the grammar's)."""
    for value in values:
        if isinstance(value, str):
            continue
        listed = _str_list(value)
        if listed is not None:
            each = ", ".join(map(repr, listed))
            fix = f"pass each name as an argument of its own: api.{fn}(*names), e.g. api.{fn}({each})"
        else:
            fix = f"e.g. api.{fn}('deepseek_v2'), or api.{fn}('deepseek_v2', 'oea_topk') for two"
        raise BadInput(f"api.{fn}: patch names are str, one per argument; got {_shown(value)}", hint=fix)


def flag(fn: str, arg: str, value: object) -> None:
    """True or False only: a str or a number counts as true whatever it says (all="no" applied every patch)."""
    if not isinstance(value, bool):
        raise BadInput(
            f"api.{fn}: {arg}= takes True or False, not {_shown(value)}",
            hint=f"pass {arg}=True, or leave {arg}= out for False",
        )


def context(fn: str, value: object) -> None:
    if value is not None and not isinstance(value, Context):
        raise BadInput(
            f"api.{fn}: context= takes the Context that api.locate() returns, not {_shown(value)}",
            hint="pass context=api.locate(...), or project=/manifest=/tree= instead of context=",
        )
