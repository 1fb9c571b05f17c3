"""An env profile against the patch set it launches: variables that would not take effect.

A variable of the profile that some patch's `env` declares does nothing unless one of those patches is in the set.
Where the declaration says `sglang_forces`, it is worse than nothing: unpatched SGLang overwrites the value
(always, or when one of the listed server flags is given), so the server runs with SGLang's value while the
profile, the fingerprint and the launch command say otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from .manifest import EnvProfile, Manifest


def _given(flag: str, server_args: list[str]) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in server_args)


def profile_warnings(
    manifest: Manifest, names: Iterable[str], profile: EnvProfile | None, server_args: list[str]
) -> list[str]:
    if profile is None:
        return []
    carried = set(names)
    out = []
    for var in profile.vars:
        readers = [(p, e) for p in manifest.patches for e in p.env if e.name == var.name]
        if not readers or any(p.name in carried for p, _ in readers):
            continue
        patches = ", ".join(p.name for p, _ in readers)
        forces = sorted({f for _, e in readers for f in e.sglang_forces})
        when = "always" if "always" in forces else " or ".join(f for f in forces if _given(f, server_args))
        if forces and when:
            out.append(
                f"env profile {profile.name} sets {var.name}={var.value}, but SGLang overwrites it "
                f"({when}) unless {patches} is applied: add it to the set (--patches ...,{readers[0][0].name}) "
                f"or drop {var.name} from the profile"
            )
        elif not forces:
            out.append(
                f"env profile {profile.name} sets {var.name}={var.value}, which only {patches} reads, and "
                f"the set does not carry it: the variable has no effect"
            )
    return out


def warn_profile(manifest: Manifest, names: Iterable[str], profile: EnvProfile | None, server_args: list[str]) -> None:
    for line in profile_warnings(manifest, names, profile, server_args):
        print(f"sglang-overlay: warning: {line}", file=sys.stderr)
