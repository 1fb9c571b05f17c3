"""What a tree carries, patch by patch: `status` (the command, and api.status, which checks its arguments and
calls `read`). Apart from api.py so that the command imports neither it nor what the API's other calls need."""

from __future__ import annotations

from collections.abc import Mapping

from .record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any

    from .context import Context
    from .manifest import Skipped


class PatchStatus(Record):
    """One patch's row: what the manifest says of it and its state in the tree."""

    name: str
    kind: str
    category: str
    default: bool
    description: str
    files: tuple[str, ...]
    upstream: str
    state: str  # applied | not-applied | upstreamed | drifted | stale | unavailable | proof-failed
    detail: str = ""
    drifted_files: tuple[str, ...] = ()  # edited by hand, or (also in mode_drifted_files) chmod-ed by hand
    mode_drifted_files: tuple[str, ...] = ()  # exec bit not the diff's mode line: `apply` sets it back


class Status(Record):
    """What the tree carries, and the state of each of the manifest's patches (`status --json`: to_json)."""

    pin_package: str
    pin_version: str
    pin_wheel: str
    tree_path: str
    tree_kind: str
    tree_version: str | None
    fingerprint: str | None
    applied: tuple[str, ...]
    patches: tuple[PatchStatus, ...]
    drifted_files: tuple[str, ...]
    identity_file: str | None
    interrupted_transaction: bool
    cuda_capability: tuple[str, ...]
    presets: Mapping[str, tuple[str, ...]]
    env_profiles: tuple[str, ...]
    skipped: tuple[Skipped, ...] = ()  # entries a rebase left out of this pin (`rebase --skip`)
    mode_drifted_files: tuple[str, ...] = ()  # the part of drifted_files whose exec bit only was changed by hand

    def patch(self, name: str) -> PatchStatus:
        """The row of the manifest's patch `name`; an unknown name is a PatchSetError that lists the known ones."""
        from . import apiargs  # only for a caller of the API

        apiargs.name("Status.patch", name)
        for p in self.patches:
            if p.name == name:
                return p
        import difflib  # only for a message (as in manifest.py)

        from .errors import PatchSetError

        known = [p.name for p in self.patches]
        close = difflib.get_close_matches(name, known, n=1)
        raise PatchSetError(
            f"api.Status.patch: no patch named {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
            hint=f"patches: {', '.join(known) or '(none)'}",
        )

    def to_json(self) -> dict[str, Any]:
        """The object `status --json` prints."""
        rows = []
        for p in self.patches:
            row: dict[str, Any] = {
                "name": p.name,
                "kind": p.kind,
                "category": p.category,
                "default": p.default,
                "description": p.description,
                "files": list(p.files),
                "upstream": p.upstream,
                "detail": p.detail,
                "state": p.state,
            }
            if p.drifted_files:
                row["drifted_files"] = list(p.drifted_files)
            if p.mode_drifted_files:
                row["mode_drifted_files"] = list(p.mode_drifted_files)
            rows.append(row)
        return {
            "pin": {"package": self.pin_package, "version": self.pin_version, "wheel": self.pin_wheel},
            "tree": {"path": self.tree_path, "kind": self.tree_kind, "version": self.tree_version},
            "fingerprint": self.fingerprint,
            "applied": list(self.applied),
            "patches": rows,
            "drifted_files": list(self.drifted_files),
            "mode_drifted_files": list(self.mode_drifted_files),
            "identity_file": self.identity_file,
            "interrupted_transaction": self.interrupted_transaction,
            "cuda_capability": list(self.cuda_capability),
            "presets": {k: list(v) for k, v in self.presets.items()},
            "env_profiles": list(self.env_profiles),
            "skipped": [
                {"name": s.name, "reason": s.reason, "stop": s.stop, "release": s.release, "from": s.source}
                for s in self.skipped
            ],
        }


def read(ctx: Context) -> Status:
    """What the tree carries and the state of every patch (read-only)."""
    from .fingerprint import patch_digest
    from .hardware import blocked, capabilities
    from .manifest import UpstreamedPatch
    from .patchfile import created_exec_bits
    from .repopath import IDENTITY_PATH
    from .treeread import base_reader, drifted_files, exec_bit_drifted, reading
    from .upstream import prove

    m, t = ctx.manifest, ctx.tree
    with reading(t) as view:
        state = view.state
        drift = drifted_files(t, state)
        carried = m.changes(n for n in state.applied if n in m.names)
        # a stale patch's mode line may be what changed: its file has the mode it had, and "stale" says apply
        fresh = [p.diff for p in carried if p.diff is not None and state.digests.get(p.name) == patch_digest(p)]
        chmodded = exec_bit_drifted(t, state, created_exec_bits(fresh))
        read_base = base_reader(t, state, view.store)
        unavailable = blocked(m.patches)
        rows = []
        for p in m.patches:
            detail, mine, modes = "", tuple[str, ...](), tuple[str, ...]()
            if isinstance(p, UpstreamedPatch):
                res = prove(p, read_base, copy=ctx.spelling.copy)
                st, detail = ("upstreamed" if res.holds else "proof-failed"), f"{p.upstream.describe()}: {res.detail}"
            elif p.name in state.applied:
                edited = tuple(sorted(f for f, r in drift.items() if p.name in r.patches))
                modes = tuple(f for f in chmodded if p.name in state.files[f].patches)
                mine = tuple(sorted({*edited, *modes}))
                if mine:
                    said = ["edited by hand: " + ", ".join(edited)] if edited else []
                    if modes:
                        said.append("exec bit changed by hand: " + ", ".join(modes) + " (apply sets it back)")
                    st, detail = "drifted", "; ".join(said)
                elif state.digests.get(p.name) != patch_digest(p):
                    st, detail = "stale", "the patch changed since it was applied: apply again"
                else:
                    st = "applied"
            else:
                why = unavailable.get(p.name)
                st, detail = ("unavailable", why) if why else ("not-applied", "")
            rows.append(
                PatchStatus(
                    p.name,
                    p.kind,
                    p.category,
                    p.default,
                    p.description,
                    tuple(p.files),
                    p.upstream.status,
                    st,
                    detail,
                    mine,
                    modes,
                )
            )
        return Status(
            pin_package=m.pin.package,
            pin_version=m.pin.version,
            pin_wheel=m.pin.wheel,
            tree_path=str(t.root),
            tree_kind=t.kind,
            tree_version=t.version(),
            fingerprint=state.fingerprint,
            applied=tuple(state.applied),
            patches=tuple(rows),
            drifted_files=tuple(sorted({*drift, *chmodded})),
            identity_file=IDENTITY_PATH if state.applied else None,
            interrupted_transaction=bool(view.pending),
            cuda_capability=tuple(capabilities() or ()),
            presets={k: tuple(v) for k, v in m.presets.items()},
            env_profiles=tuple(sorted(m.env_profiles)),
            skipped=m.skipped,
            mode_drifted_files=chmodded,
        )
