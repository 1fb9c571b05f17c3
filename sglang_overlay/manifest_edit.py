"""Edits of a manifest's YAML text that keep everything else of it (comments, order, layout) as written:
the pin's values, and one key of one patch entry replaced or removed. The result is always loaded again
(`load_manifest`) before anything uses it."""

from __future__ import annotations

import re

import yaml

from .errors import ManifestError
from .manifest import Pin, Proof

_TOP_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*:")


def _block(lines: list[str], start: int, indent: int) -> int:
    """The end (exclusive) of the block that starts at line `start`: the next line indented at most `indent`
    that is not blank or a comment."""
    end = start + 1
    while end < len(lines):
        line = lines[end]
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and len(line) - len(line.lstrip()) <= indent:
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1  # blank lines before the next block belong to it
    return end


def set_pin(text: str, pin: Pin, where: str) -> str:
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("pin:")]
    if len(starts) != 1:
        raise ManifestError(f"{where}: expected one top-level `pin:`", hint="declare the pin in this manifest")
    start = starts[0]
    end = _block(lines, start, 0)
    notes = [line for line in lines[start + 1 : end] if line.strip().startswith("#")]  # why the pin is what it is
    lines[start:end] = [
        "pin:\n",
        *notes,
        f"  package: {pin.package}\n",
        f"  version: {_scalar(pin.version)}\n",
        f"  git_tag: {_scalar(pin.git_tag)}\n",
        f"  wheel: {pin.wheel}\n",
        f"  sha256: {pin.sha256}\n",
    ]
    return "".join(lines)


def _scalar(value: str) -> str:
    return yaml.safe_dump(value, default_style=None).strip().removesuffix("...").strip()


def remove_entry(text: str, name: str, where: str) -> str:
    """The entry `name` taken out of `patches:`: its block, with any comment lines that follow it inside the list."""
    lines = text.splitlines(keepends=True)
    head = _entry_head(lines, name, where)
    del lines[head : _block(lines, head, 2)]
    return "".join(lines)


def add_entries(text: str, entries: str, where: str) -> str:
    """`entries` (blocks of `  - name: ...` lines) appended to the `patches:` list, after its last entry."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r"patches:\s*(\[\s*\])?\s*(#.*)?", line.rstrip("\n"))]
    if len(starts) != 1:
        raise ManifestError(f"{where}: expected one top-level `patches:`", hint="declare the patches in this manifest")
    start = starts[0]
    if "[" in lines[start]:  # `patches: []`: the list starts here
        lines[start] = "patches:\n"
    end = _block(lines, start, 0)
    while True:  # a list indented 0: its items, and the blank lines and comments between them, are in it
        nxt = next((j for j in range(end, len(lines)) if lines[j].strip() and not lines[j].startswith("#")), None)
        if nxt is None or not re.match(r"-(\s|$)", lines[nxt]):
            break
        end = _block(lines, nxt, 0)
    if lines[end - 1].strip() and not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    items = [len(ln) - len(ln.lstrip()) for ln in lines[start + 1 : end] if ln.lstrip().startswith("- ")]
    shift = (items[0] if items else 2) - 2  # the list's own indent (0 and 4 are as valid as 2)
    blocks = [_shifted(b, shift) for b in _blocks(entries)]
    lines[end:end] = ["\n" + block if not block.startswith("\n") else block for block in blocks]
    return "".join(lines)


def _shifted(block: str, shift: int) -> str:
    return "".join(
        (" " * shift + ln if shift > 0 else ln[-shift:]) if ln.strip() else ln for ln in block.splitlines(keepends=True)
    )


def _blocks(entries: str) -> list[str]:
    return ["  - name:" + b for b in entries.split("  - name:") if b.strip()]


def set_top_key(text: str, key: str, value: object) -> str:
    """Replace (or append, or with value None remove) the top-level `key`, written as YAML; the comments inside
    the old block are not kept."""
    lines = text.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.startswith(f"{key}:")), None)
    new = [] if value is None else [line[4:] for line in _yaml_key(key, value)]
    if at is None:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines += new
    else:
        lines[at : _block(lines, at, 0)] = new
    return "".join(lines)


def _entry_head(lines: list[str], name: str, where: str) -> int:
    heads = [i for i, line in enumerate(lines) if re.fullmatch(rf"  - name: {re.escape(name)}\s*", line)]
    if len(heads) != 1:
        raise ManifestError(
            f"{where}: cannot find the entry `- name: {name}` to rewrite",
            hint="write each entry as a block starting with `  - name: NAME`",
        )
    return heads[0]


def set_entry_key(text: str, name: str, key: str, value: object, where: str) -> str:
    """Replace (or add, or with value None remove) `key` of the entry `name`; the value is written as YAML."""
    lines = text.splitlines(keepends=True)
    head = _entry_head(lines, name, where)
    end = _block(lines, head, 2)
    at = next((i for i in range(head + 1, end) if lines[i].startswith(f"    {key}:")), None)
    new = [] if value is None else _yaml_key(key, value)
    if at is None:
        lines[end:end] = new
    else:
        lines[at : _block(lines, at, 4)] = new
    return "".join(lines)


class _Dumper(yaml.SafeDumper):
    """Lines of code quoted as they read: a multi-line string as a block (`|-`), not one escaped line."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def _yaml_key(key: str, value: object) -> list[str]:
    if isinstance(value, Proof):
        value = {"file": value.file, "symbols": list(value.symbols), "contains": list(value.contains)}
        value = {k: v for k, v in value.items() if v}
    dumped = yaml.dump(
        {key: value}, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=True
    )
    return ["    " + line + "\n" for line in dumped.splitlines()]
