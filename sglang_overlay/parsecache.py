"""What parsing a text gave, kept as JSON in the cache directory under the sha256 of the text.

The manifest's YAML and the patch files are parsed by every command, `status` included, though they rarely
change: PyYAML's and unidiff's imports and parses were a third of what `status` cost. A changed byte is a new
key, so an entry is never stale; one that is torn, or of another format or key, is ignored (the text is parsed
again). Only data JSON gives back unchanged is kept (not dates, or keys that are not strings); a text that
fails to parse is never kept (its error names the file, and is raised again each time).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from .cachedir import cache_dir, keep, left_by_the_dead

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any

FORMAT = 3  # bump when what a parser gives or refuses changes (2: file modes refused, 3: executable files): old entries are never read
KEEP = 4096  # entries kept per kind, the newest: every patch of the largest set, and a file's saves over months
_pruned: set[Path] = set()  # directories pruned by this process (once is enough: a run adds a set's entries)


def cached(kind: str, text: str, parse: Callable[[], Any]) -> Any:
    """parse(), or what it gave for this very text before."""
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()
    entry = cache_dir() / "parsed" / kind / f"{key}.json"
    try:
        got = json.loads(entry.read_bytes())
        if isinstance(got, dict) and got.get("format") == FORMAT and got.get("sha256") == key:
            return got["data"]
    except (OSError, ValueError, KeyError):
        pass
    data = parse()
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
    if keep(entry, blob.encode()):
        _prune(entry.parent)


def _prune(d: Path) -> None:
    """Once a process: the newest KEEP entries stay; temp files killed commands left go."""
    if d in _pruned:
        return
    _pruned.add(d)
    import time

    try:  # best effort, as the write: another process may prune the same directory at once
        names = os.listdir(d)
        now = time.time()
        stale = [d / n for n in names if n.startswith(".tmp-") and left_by_the_dead(n, (d / n).stat().st_mtime, now)]
        entries = [d / n for n in names if n.endswith(".json")]
        if len(entries) > KEEP:
            entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
            stale += entries[KEEP:]
        for old in stale:
            old.unlink()
    except OSError:
        pass
