"""Show the pin, the tree, the fingerprint, and each patch's state: applied, not-applied, upstreamed, drifted,
stale (the patch file changed since it was applied), unavailable (hardware gate), or proof-failed. Read-only."""

from __future__ import annotations

import json
from typing import Any

from ..fingerprint import patch_digest, short
from ..hardware import capabilities, gate_fails
from ..manifest import UpstreamedPatch
from ..repopath import IDENTITY_PATH
from ..switch import base_reader, drifted_files
from ..transaction import reading
from ..upstream import prove

NAME = "status"
HELP = "show what the tree carries (read-only)"
MARK = {
    "applied": "[x]",
    "not-applied": "[ ]",
    "upstreamed": "[=]",
    "drifted": "[!]",
    "stale": "[~]",
    "unavailable": "[-]",
    "proof-failed": "[?]",
}


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def collect(ctx) -> dict[str, Any]:
    m, tree = ctx.manifest, ctx.tree
    with reading(tree) as view:
        return _collect(m, tree, view)


def _collect(m, tree, view) -> dict[str, Any]:
    state, pending = view.state, view.pending
    drift = drifted_files(tree, state)
    read_base = base_reader(tree, state, view.store)
    rows = []
    for p in m.patches:
        row = {
            "name": p.name,
            "kind": p.kind,
            "category": p.category,
            "default": p.default,
            "description": p.description,
            "files": list(p.files),
            "upstream": p.upstream.status,
            "detail": "",
        }
        if isinstance(p, UpstreamedPatch):
            res = prove(p, read_base)
            row["state"] = "upstreamed" if res.holds else "proof-failed"
            row["detail"] = f"{p.upstream.describe()}: {res.detail}"
        elif p.name in state.applied:
            mine = sorted(f for f, r in drift.items() if p.name in r.patches)
            if mine:
                row["state"], row["detail"] = "drifted", "edited by hand: " + ", ".join(mine)
                row["drifted_files"] = mine
            elif state.digests.get(p.name) != patch_digest(p):
                row["state"], row["detail"] = "stale", "the patch changed since it was applied: apply again"
            else:
                row["state"] = "applied"
        else:
            why = gate_fails(p.cuda_capability)
            row["state"], row["detail"] = ("unavailable", why) if why else ("not-applied", "")
        rows.append(row)
    return {
        "pin": {"package": m.pin.package, "version": m.pin.version, "wheel": m.pin.wheel},
        "tree": {"path": str(tree.root), "kind": tree.kind, "version": tree.version()},
        "fingerprint": state.fingerprint,
        "applied": list(state.applied),
        "patches": rows,
        "drifted_files": sorted(drift),
        "identity_file": IDENTITY_PATH if state.applied else None,
        "interrupted_transaction": pending,
        "cuda_capability": list(capabilities() or []),
        "presets": {k: list(v) for k, v in m.presets.items()},
        "env_profiles": sorted(m.env_profiles),
    }


def run(ctx, args) -> int:
    info = collect(ctx)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    t = info["tree"]
    print(f"sglang {info['pin']['version']} (pinned)   tree {t['path']} [{t['kind']}, sglang {t['version']}]")
    print(
        f"fingerprint {short(info['fingerprint'])}   applied {len(info['applied'])} of "
        f"{sum(1 for r in info['patches'] if r['kind'] != 'upstreamed')} patches"
    )
    if info["interrupted_transaction"]:
        print(
            "note: an interrupted command left a journal; `python apply.py recover` (or the next command that "
            "changes the tree) rolls it back; shown here as it will be then"
        )
    width = max(len(r["name"]) for r in info["patches"]) if info["patches"] else 4
    for r in info["patches"]:
        line = f"  {MARK[r['state']]} {r['name']:<{width}}  {r['category']:<12} {r['state']:<12} "
        line += r["detail"] or r["description"]
        print(line.rstrip())
    return 0
