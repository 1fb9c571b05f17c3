"""A manifest's YAML text -> plain data (safe loader, no duplicate keys, no alias bombs), cached by its bytes.

PyYAML's import and parse are a third of what `status` costs, for a file that rarely changes. The data of a
text that parsed is kept as JSON in the cache directory under the sha256 of the text: a changed byte is a new
key, so the cache is never stale; a cached file that is torn, or of another format or key, is ignored (and the
text parsed again). Only data JSON gives back unchanged is cached (not dates, or keys that are not strings).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .cachedir import cache_dir
from .errors import ManifestError

FORMAT = 1  # bump when what the loader accepts changes: old entries are then never read
KEEP = 32  # cached texts kept (the newest); a manifest edited all day makes a new entry per save

# A manifest is a few hundred nodes. These bounds refuse "billion laughs" alias bombs and deep nesting before
# anything walks the data (an expanded bomb would hang every command that reads the manifest).
MAX_ALIASES = 100
MAX_NODES = 100_000
MAX_DEPTH = 64


def load(path: Path, text: str) -> Any:
    """The data of `text` (read from `path`, named in errors)."""
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()
    entry = cache_dir() / "manifests" / f"{key}.json"
    try:
        cached = json.loads(entry.read_bytes())
        if isinstance(cached, dict) and cached.get("format") == FORMAT and cached.get("sha256") == key:
            return cached["data"]
    except (OSError, ValueError, KeyError):
        pass
    data = parse(path, text)
    _store(entry, key, data)
    return data


def _store(entry: Path, key: str, data: Any) -> None:
    """Best effort: a read-only or full cache directory only means the next run parses again."""
    try:
        blob = json.dumps({"format": FORMAT, "sha256": key, "data": data}, allow_nan=False)
        if json.loads(blob)["data"] != data:
            return
    except (TypeError, ValueError):  # a date, a set, a NaN: YAML has more types than JSON
        return
    import tempfile

    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=entry.parent)
        with os.fdopen(fd, "w") as f:
            f.write(blob)
        os.replace(tmp, entry)  # whole or absent: readers never see a half-written entry
        tmp = None
        _prune(entry.parent)
    except OSError:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _prune(d: Path) -> None:
    """The newest KEEP entries stay; a temp file an hour old is one a killed command left."""
    import time

    entries = sorted(d.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[KEEP:] + [t for t in d.glob(".tmp-*") if time.time() - t.stat().st_mtime > 3600]:
        old.unlink()


# ------------------------------------------------------------------------------------------------ parsing
def parse(path: Path, text: str) -> Any:
    import yaml

    loader = _strict_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(path, node)
        return loader.construct_document(node)
    except _duplicate_key() as e:
        raise ManifestError(
            f"{path}: line {e.again.line + 1}: duplicate key {e.key!r} (first at line {e.first.line + 1})",
            hint="keep one of them: YAML would silently use the last one",
        )
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise ManifestError(
            f"{path}: not valid YAML at {where}: {getattr(e, 'problem', e)}",
            hint="fix the YAML syntax (indentation, quoting) at that line",
        )
    finally:
        loader.dispose()


@functools.cache
def _duplicate_key() -> type:
    import yaml

    class DuplicateKey(yaml.YAMLError):
        def __init__(self, key, first, again):
            super().__init__(f"duplicate key {key!r}")
            self.key, self.first, self.again = key, first, again

    return DuplicateKey


@functools.cache
def _strict_loader() -> type:
    import yaml

    duplicate = _duplicate_key()

    class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml where it is built
        """The safe loader, refusing a key given twice in one mapping (YAML would silently keep the last)."""

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                first: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        seen = first.setdefault(key, key_node.start_mark)
                    except TypeError:
                        continue  # an unhashable key: the base class says so
                    if seen is not key_node.start_mark:
                        raise duplicate(key, seen, key_node.start_mark)
            return super().construct_mapping(node, deep)

    return StrictLoader


def _check_size(path: Path, root) -> None:
    """Walk the node graph as the data would expand, stopping at the first bound it crosses."""
    import yaml

    seen: set[int] = set()
    aliases = nodes = 0
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        line = node.start_mark.line + 1
        if id(node) in seen:
            aliases += 1
        seen.add(id(node))
        problem = (
            f"more than {MAX_ALIASES} alias uses"
            if aliases > MAX_ALIASES
            else f"nesting deeper than {MAX_DEPTH} levels"
            if depth > MAX_DEPTH
            else f"more than {MAX_NODES} values once its aliases are expanded"
            if nodes > MAX_NODES
            else None
        )
        if problem:
            raise ManifestError(
                f"{path}: line {line}: the YAML holds {problem}; a manifest needs none of that",
                hint="write the entries out (aliases `*name` and anchors `&name` are rarely needed in a manifest)",
            )
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((child, depth + 1) for pair in node.value for child in pair)
