"""Show the pin, the tree, the fingerprint, and each patch's state: applied, not-applied, upstreamed, drifted,
stale (the patch file changed since it was applied), unavailable (hardware gate), or proof-failed; and the
entries a rebase left out of this pin (`skipped:`, from `rebase --skip`). Read-only."""

from __future__ import annotations

import json

from ..fingerprint import short
from ..progname import prog
from ..treestatus import read  # what api.status returns, without the rest of the API (api.py)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any

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
    return read(ctx).to_json()


def run(ctx, args) -> int:
    info = collect(ctx)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    t = info["tree"]
    version = f"sglang {t['version']}" if t["version"] is not None else "version unknown"
    print(f"sglang {info['pin']['version']} (pinned)   tree {t['path']} [{t['kind']}, {version}]")
    print(
        f"fingerprint {short(info['fingerprint'])}   applied {len(info['applied'])} of "
        f"{sum(1 for r in info['patches'] if r['kind'] != 'upstreamed')} patches"
    )
    if t["version"] != info["pin"]["version"]:  # the rows below read this tree against another release's set
        from ..treepin import note

        print(note(ctx))
    if info["interrupted_transaction"]:
        print(
            f"note: an interrupted command left a journal; `{prog()} recover` (or the next command that "
            "changes the tree) rolls it back; shown here as it will be then"
        )
    gone = [n for n in info["applied"] if n not in {r["name"] for r in info["patches"]}]
    if gone:  # counted in "applied N" above, and no row below says so
        print(
            f"note: the tree carries {', '.join(gone)}, which the manifest does not name (renamed or removed?); "
            f"`{prog()} revert --all` takes the tree back to pristine"
        )
    width = max(len(r["name"]) for r in info["patches"]) if info["patches"] else 4
    for r in info["patches"]:
        line = f"  {MARK[r['state']]} {r['name']:<{width}}  {r['category']:<12} {r['state']:<12} "
        line += r["detail"] or r["description"]
        print(line.rstrip())
    owned = {f for r in info["patches"] for f in r.get("drifted_files", ())}
    for f in (x for x in info["drifted_files"] if x not in owned):
        # no row above owns it (the identity module the tool writes for every set): apply and revert refuse it
        # all the same, so it is shown, with the way out that works (refresh has no patch to put it in)
        print(
            f"  [!] {f}: changed by hand; sglang-overlay writes it for every set, so no patch carries the edit: "
            f"undo it, or `{prog()} revert --all --force` (it is saved to a backup first) and apply the set again"
        )
    for sk in info["skipped"]:  # entries a rebase left out of this pin: not patches of it, not to be forgotten
        line = f"skipped carrying {sk['from']} -> {sk['release']}: {sk['reason']}"
        print(
            f"  [s] {sk['name']:<{width}}  {'':<12} {'skipped':<12} {line}" + (f" ({sk['stop']})" if sk["stop"] else "")
        )
    return 0
