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
from typing import Any

from .cachedir import cache_dir

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
    import tempfile

    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        # the writer's pid in the name: the next writer removes what a killed one left (_prune)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{os.getpid()}-", dir=entry.parent)
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


def _left_by_the_dead(name: str, mtime: float, now: float) -> bool:
    """A temp file whose writer is gone (its pid no longer runs) or, whatever its name, an hour old."""
    if now - mtime > 3600:
        return True
    pid = name.split("-")[1] if name.count("-") >= 2 else ""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def _prune(d: Path) -> None:
    """Once a process: the newest KEEP entries stay; temp files killed commands left go."""
    if d in _pruned:
        return
    _pruned.add(d)
    import time

    names = os.listdir(d)
    now = time.time()
    stale = [d / n for n in names if n.startswith(".tmp-") and _left_by_the_dead(n, (d / n).stat().st_mtime, now)]
    entries = [d / n for n in names if n.endswith(".json")]
    if len(entries) > KEEP:
        entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        stale += entries[KEEP:]
    for old in stale:
        old.unlink()
