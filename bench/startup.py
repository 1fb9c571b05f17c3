"""Where a server start's seconds go, read back from the server's own log.

SGLang logs "<what> begin." / "<what> end. elapsed=X s" around weight loading, torch distributed init and each
CUDA-graph capture (target decode, draft decode, draft extend, prefill), and "The server is fired up" when it
serves. Lines carry a second-resolution timestamp, so the phases with an `elapsed=` use it and the others use
timestamp differences (+-1 s). What precedes the first log line (Python imports of the server's main process,
the tool's switch of the tree) is the launch-to-first-line gap, measured by the runner's own clock.
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime
from pathlib import Path
from typing import Any

_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[^\]]*?)\]\s*(.*)$")
_EDGE = re.compile(r"^(?P<what>[A-Z][\w /+-]*?) (?P<edge>begin|end|ends)\b")
_ELAPSED = re.compile(r"elapsed=\s*([\d.]+)\s*s")
READY = "The server is fired up"


def parse(text: str) -> list[tuple[float, str]]:
    out = []
    for ln in text.splitlines():
        m = _LINE.match(ln.strip())
        if m:
            try:
                ts = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
            except ValueError:
                continue
            out.append((ts, m.group(2)))
    return out


def breakdown(log_text: str, launched_at: float | None = None, ready_at: float | None = None) -> dict:
    """{"phases": [{"name", "s", "how"}], "first_line_s", "log_span_s", "total_s", "unaccounted_s"}.

    launched_at / ready_at: epoch seconds of the launch command and of the url line (the runner's clock).
    """
    lines = parse(log_text)
    phases: list[dict] = []
    open_: dict[str, float] = {}
    seen: dict[str, int] = {}
    for ts, msg in lines:
        m = _EDGE.match(msg)
        if not m:
            continue
        what = m.group("what").strip()
        if m.group("edge") == "begin":
            open_[what] = ts
            continue
        el = _ELAPSED.search(msg)
        # the target's and then the draft's model runner log the same names: number the repeats
        seen[what] = seen.get(what, 0) + 1
        name = what if seen[what] == 1 else f"{what} #{seen[what]}"
        if el:
            phases.append({"name": name, "s": float(el.group(1)), "how": "elapsed"})
        elif what in open_:
            phases.append({"name": name, "s": ts - open_[what], "how": "timestamps"})
        open_.pop(what, None)
    first = lines[0][0] if lines else None
    ready = next((ts for ts, msg in lines if msg.startswith(READY)), None)
    out: dict = {"phases": phases, "gaps": gaps(lines)}
    if first is not None and ready is not None:
        out["log_span_s"] = ready - first
    if launched_at is not None and first is not None:
        out["first_line_s"] = max(0.0, first - launched_at)
    if launched_at is not None and ready_at is not None:
        out["total_s"] = ready_at - launched_at
        out["unaccounted_s"] = out["total_s"] - sum(p["s"] for p in phases)
    return out


def gaps(lines: list[tuple[float, str]], n: int = 5, at_least: float = 2.0) -> list[dict]:
    """The longest silences between consecutive log lines up to the server being ready, with the lines around
    them: the phases SGLang does not bracket (a spawned scheduler importing sglang before its first line took
    28 of a 76 s warm start on the H200) show up here."""
    out: list[dict[str, Any]] = []
    for (t0, before), (t1, after) in itertools.pairwise(lines):
        if before.startswith(READY):
            break
        if t1 - t0 >= at_least:
            out.append({"s": t1 - t0, "after": before[:160], "before": after[:160]})
    return sorted(out, key=lambda g: -g["s"])[:n]


def from_file(path: str | Path, launched_at: float | None, ready_at: float | None) -> dict:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        return {"error": str(e), "phases": []}
    return breakdown(text, launched_at, ready_at)
