"""Prove the patch set against the pristine pinned release (CI): every patch alone, the full set, leave-one-out,
every pair sharing a file; zero fuzz; the same bytes in another order (each pair swapped; `requires:` kept);
patched files byte-compile; upstreamed
entries still hold; overlay files do not collide. Exit 0 only if all hold, else 1 with every failure listed.
With --all-pins, each pin on its own release; one that cannot be checked at all (its release, its manifest) is
reported as such while the rest are checked, and the exit code is the worst outcome (2 for bad input).

With --against VERSION...: the release radar. Each patch is classified per release as clean, offset,
needs-3way, conflict, upstreamed, upstreamed-moved, proof-failed or target-missing (exit 0: the radar informs, it
does not gate)."""

from __future__ import annotations

import json
import sys
import time

from .. import api
from ..compat import EXPLAINED, STATUSES, radar
from ..errors import BadInput, CheckFailed, OverlayError, PinNotChecked, os_failure
from ..fetch import WheelSource, latest_release, pinned_wheel, release_wheel
from ..manifest import Manifest, load_manifest
from ..pins import all_pins, listed_manifest_path
from ..progname import prog
from ..rebase_state import PINS_DIR, VERSION_RE

NAME = "check"
HELP = "check that the patch set applies to the pin (CI), or --against newer releases (radar)"


def add_arguments(p) -> None:
    p.add_argument(
        "--against",
        nargs="+",
        metavar="VERSION",
        help="classify each patch against these releases ('latest': the newest on the index)",
    )
    p.add_argument(
        "--all-pins",
        action="store_true",
        help="check every pin of the project: the top level and each pins/VERSION/ (what CI runs)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--json", action="store_true", help="print one JSON object (with --all-pins: one keyed by pin version)"
    )
    out.add_argument("--markdown", action="store_true", help="print a markdown table (for a pull-request comment)")


def run(ctx, args) -> int:
    if args.all_pins:
        if args.against:
            raise BadInput("check: --all-pins checks each pin on its own release; --against is for one set")
        return _all_pins(ctx, args)
    m = ctx.manifest
    if args.against:
        return _radar(ctx, args)
    rep = api.check(context=ctx)
    if not _check_one(m, rep, args):
        raise CheckFailed(
            f"the patch set does not hold on {m.pin.package} {m.pin.version}" + _where({m.pin.version: rep}, args),
            hint=f"fix or refresh the failing patches; `{prog()} diff NAME` shows one",
        )
    return 0


def _all_pins(ctx, args) -> int:
    top = ctx.top_manifest
    checked: dict[str, api.CheckResult] = {}
    # A pin that cannot be checked at all (its release not fetched, its manifest malformed) is reported, and the
    # others still checked: stopping at it had lost their results, and with --json left stdout empty.
    unchecked: dict[str, OverlayError] = {}
    reports = {}  # --json: one document for all pins, keyed by version (a JSON object per pin parses as none)
    for version in all_pins(top):
        path = top.path if version == top.pin.version else top.project_root / PINS_DIR / version / "manifest.yaml"
        if not args.json:
            print(f"== pin {version} ({path})", flush=True)
        started = time.monotonic()
        try:
            m, rep = _check_listed(top, version)
        except OverlayError as err:
            unchecked[version] = err
            if args.json:
                reports[version] = _unchecked_json(top, version, err, time.monotonic() - started)
            else:
                said = str(err).replace("\n", "\n     ")
                print(f"NOT CHECKED: {said}" + (f"\n     hint: {err.hint}" if err.hint else ""))
            continue
        checked[version] = rep
        if args.json:
            reports[version] = rep.to_json()
        else:
            _check_one(m, rep, args)
    if args.json:
        print(json.dumps(reports, indent=2))
    failed = {v: rep for v, rep in checked.items() if not rep.ok}
    if unchecked:
        raise _not_checked(unchecked, checked, failed, args)
    if failed:
        raise CheckFailed(
            f"the patch set does not hold on pin(s) {', '.join(failed)}" + _where(failed, args),
            hint=_alone(failed),
        )
    return 0


def _check_listed(top: Manifest, version: str) -> tuple[Manifest, api.CheckResult]:
    try:
        m = load_manifest(listed_manifest_path(top, version))
        return m, api.check(manifest=m.path)
    except OSError as e:  # what the command line says of it, said of this pin alone
        raise os_failure(e, "cannot access", "this pin was not checked") from e


def _unchecked_json(top: Manifest, version: str, err: OverlayError, seconds: float) -> dict[str, object]:
    """A pin not checked, in a checked pin's keys and types (a dashboard reads every entry alike; one of its own
    keys had stopped it): no items, and one failure, the pin's own, said in "error" with the pin's name, as the
    entry may be read without its key."""
    entry = api.CheckResult(top.pin.package, version, False, (), (), seconds).to_json()
    said = f"pin {version} could not be checked: {err}"
    return {**entry, "status": "error", "failures": 1, "error": said, "hint": err.hint}


def _not_checked(
    unchecked: dict[str, OverlayError], checked: dict[str, api.CheckResult], failed: dict[str, api.CheckResult], args
) -> OverlayError:
    """Every pin's outcome in one error, exit 2 (a pin could not be checked: a release that cannot be fetched, a
    malformed manifest, a cache the OS refuses), which no passing or failing pin beside it makes less."""
    others = ", ".join(f"{v} {'holds' if rep.ok else 'does not hold'}" for v, rep in checked.items())
    lines = [
        f"pin{'s' * (len(unchecked) > 1)} {', '.join(unchecked)} could not be checked"
        + (f" (the others were: {others})" if others else "")
        + ":"
    ]
    for v, err in unchecked.items():
        said = str(err).replace("\n", "\n    ")  # pip's own lines, among others, kept under their pin
        lines.append(f"  {v}: {said}" + (f"\n    fix: {err.hint}" if err.hint else ""))
    if failed:
        lines.append(f"  and the patch set does not hold on pin(s) {', '.join(failed)}" + _where(failed, args))
    # always 2, even where the cause was the OS's (exit 1 alone): CI must not read "a pin fails" for a pin that
    # was never checked
    return PinNotChecked("\n".join(lines), hint=_alone(failed) if failed else None)


def _alone(failed: dict[str, api.CheckResult]) -> str:
    return f"`{prog(pin=False)} --pin {next(iter(failed))} check` shows that pin alone"


def _where(failed: dict[str, api.CheckResult], args) -> str:
    """Where the failures are. The human and markdown output list them above the error; with --json, stdout is
    the document (often sent to a file, never "above" the error in a CI log), so the error names them itself."""
    if not args.json:
        return " (failures above)"
    pin = len(failed) > 1  # one failing pin is named by the error already
    said = [f"{v}: {i.subject}" if pin else i.subject for v, rep in failed.items() for i in rep.failures]
    shown = "; ".join(said[:5]) + (f"; and {len(said) - 5} more" if len(said) > 5 else "")
    return (
        f': {len(said)} failure{"s" * (len(said) != 1)}, each an item with "ok": false in the JSON on stdout ({shown})'
    )


def _check_one(m, rep: api.CheckResult, args) -> bool:
    elapsed = rep.seconds
    if args.json:
        print(json.dumps(rep.to_json(), indent=2))
    elif args.markdown:
        print(f"### sglang-overlay check on {m.pin.package} {m.pin.version}: {'pass' if rep.ok else 'FAIL'}\n")
        print("| check | subject | result | detail |\n|---|---|---|---|")
        for i in rep.items:
            print(f"| {i.what} | {i.subject} | {'ok' if i.ok else '**FAIL**'} | {i.detail.replace(chr(10), '<br>')} |")
    else:
        for i in rep.items:
            if not i.ok:
                print(f"FAIL {i.subject}\n     " + i.detail.replace("\n", "\n     "))
        for o in rep.offsets:
            print(f"note offset: {o}")
        passed = sum(i.ok for i in rep.items)
        print(
            f"check {m.pin.package} {m.pin.version}: {passed} of {len(rep.items)} checks passed in {elapsed:.2f}s"
            + ("" if rep.ok else f"; {len(rep.items) - passed} FAILED")
        )
    return rep.ok


def _radar(ctx, args) -> int:
    m = ctx.manifest
    for v in args.against:  # before pip is asked: '' and '../x' went to it (and '../x' names a cache directory)
        if v != "latest" and not VERSION_RE.fullmatch(v):
            raise BadInput(f"check --against: {v!r} is not a release version", hint="e.g. `--against 0.5.23 latest`")
    versions = list(dict.fromkeys(latest_release(m.pin.package) if v == "latest" else v for v in args.against))
    if not m.patches:
        return _no_patches(m, versions, args)
    pin_source = WheelSource(pinned_wheel(m.pin))
    sources = {}
    for i, v in enumerate(versions, 1):
        print(f"sglang-overlay: [{i}/{len(versions)}] release {v}", file=sys.stderr, flush=True)
        sources[v] = WheelSource(release_wheel(m.pin, v))
    t0 = time.monotonic()
    verdicts = radar(m, versions, lambda v: sources[v].read, pin_source.read, lambda v: sources[v].paths)
    elapsed = time.monotonic() - t0
    if args.json:
        print(
            json.dumps(
                {
                    "pin": m.pin.version,
                    "versions": versions,
                    "seconds": round(elapsed, 3),
                    "wheels": {v: sources[v].wheel.name for v in versions},
                    "verdicts": [vars(v) for v in verdicts],
                },
                indent=2,
            )
        )
        return 0
    table = {(v.patch, v.version): v for v in verdicts}
    if args.markdown:
        print(f"### sglang-overlay release radar (pin {m.pin.version})\n")
        print("| patch | " + " | ".join(versions) + " |\n|---|" + "---|" * len(versions))
        for p in m.patches:
            print(f"| {p.name} | " + " | ".join(_cell(table[(p.name, v)]) for v in versions) + " |")
        details = [v for v in verdicts if v.status in EXPLAINED]
        if details:
            print("\n<details><summary>why</summary>\n")
            for v in details:
                print(f"- **{v.patch}** on {v.version}: {v.status}: {v.detail}")
            print("\n</details>")
        print(f"\nlegend: {', '.join(STATUSES)}")
        return 0
    width = max(len(p.name) for p in m.patches)
    print(f"{'patch':<{width}}  " + "  ".join(f"{v:<17}" for v in versions))
    for p in m.patches:
        print(f"{p.name:<{width}}  " + "  ".join(f"{_cell(table[(p.name, v)]):<17}" for v in versions))
    for v in verdicts:
        if v.status in EXPLAINED:
            print(f"  {v.patch} on {v.version}: {v.status}: {v.detail}")
    print(f"radar: {len(m.patches)} patches x {len(versions)} releases classified in {elapsed:.2f}s", file=sys.stderr)
    return 0


def _no_patches(m, versions: list[str], args) -> int:
    """`patches: []`: nothing of the set can break on a release, so none is downloaded to say so (the table had
    crashed on the width of no names). The radar's own shapes, empty, so a nightly job reads it as before."""
    said = f"{m.path} has no patches: nothing to classify against {', '.join(versions)}"
    if args.json:
        doc = {"pin": m.pin.version, "versions": versions, "seconds": 0.0, "wheels": {}, "verdicts": []}
        print(json.dumps(doc, indent=2))
    elif args.markdown:
        print(f"### sglang-overlay release radar (pin {m.pin.version})\n\n{said}")
    else:
        print(said)
    return 0


def _cell(v) -> str:
    return f"offset {v.max_offset:+d}" if v.status == "offset" else v.status
