"""manifest.yaml -> validated, frozen objects. Nothing touches a tree before this has accepted the whole file.

Every error names the manifest file, the entry and the key, and says the fix (complaint #2 of every patch tool).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path

from . import manifestmemo, yamlfile
from .errors import ManifestError, PathEscape
from .patchfile import PatchFile, parse_patch_file
from .pathlen import too_long
from .progname import prog
from .record import Record, field, fields
from .repopath import check_patchable, check_repo_path
from .spelling import CLI, Spelling

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any, ClassVar, Literal, TypedDict

SCHEMA_VERSION = 1
CATEGORIES = ("essential", "compat", "diagnostic", "experimental")
UPSTREAM_STATUSES = ("not-forwarded", "forwarded", "upstreamed", "not-needed")
NAME_RE = re.compile(r"[a-z][a-z0-9_]*")  # always fullmatch: `$` would let a trailing newline through
ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*")
# The set grammar (patchset.py) reads these as the empty set: a patch or preset of that name could never be named.
EMPTY_NAMES = ("none", "pristine")

TOP_KEYS = ("schema", "extends", "pin", "patches", "presets", "env_profiles", "skipped")
PIN_KEYS = ("package", "version", "git_tag", "wheel", "sha256")
PATCH_KEYS = (
    "name",
    "description",
    "kind",
    "category",
    "default",
    "requires",
    "conflicts",
    "overlay",
    "env",
    "hardware",
    "upstream",
    "proof",
    "file",
)
ENV_VAR_KEYS = ("default", "help", "sglang_forces")
HARDWARE_KEYS = ("cuda_capability",)
UPSTREAM_KEYS = ("status", "release", "pr", "url")
PROOF_KEYS = ("file", "symbols", "contains")
PROFILE_KEYS = ("description", "vars")
PROFILE_VAR_KEYS = ("value", "why")
SKIPPED_KEYS = ("reason", "stop", "release", "from")


class Pin(Record):
    """The release the patches are made against (the manifest's `pin:`)."""

    package: str
    version: str
    git_tag: str
    wheel: str
    sha256: str


class EnvVar(Record):
    """An environment variable a patch reads, with its default and what it does."""

    name: str
    default: str
    help: str
    # When unpatched SGLang overwrites this variable: ("always",) or the server flags that make it; () never.
    sglang_forces: tuple[str, ...] = ()


class Upstream(Record):
    """Where a patch stands upstream: not-forwarded, forwarded, upstreamed (in `release`, by `pr`) or not-needed."""

    status: str
    release: str | None = None
    pr: int | None = None
    url: str | None = None

    def describe(self) -> str:
        parts = [self.status]
        if self.release:
            parts.append(f"in {self.release}")
        if self.pr:
            parts.append(f"(PR #{self.pr})")
        return " ".join(parts)


class Proof(Record):
    """What must hold on a tree for an `upstreamed` entry to count as upstream."""

    file: str
    symbols: tuple[str, ...] = ()
    contains: tuple[str, ...] = ()


class _Entry(Record, kw_only=True):
    """What every kind of entry has: its name, relations, environment, gate and upstream record."""

    name: str
    description: str
    category: str
    default: bool
    requires: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    cuda_capability: tuple[str, ...] = ()  # empty: no hardware gate
    upstream: Upstream = Upstream("not-forwarded")
    source_dir: Path  # directory of the manifest that declared it: overlay/ and patches/ are relative to it

    def overlay_source(self, repo_path: str) -> Path:
        return self.source_dir / "overlay" / repo_path


def _written(diff: PatchFile | None, overlay: tuple[str, ...]) -> tuple[str, ...]:
    """Repo paths an entry writes when applied (derived from the diff, never typed twice)."""
    return tuple(sorted(set(diff.files if diff is not None else ()) | set(overlay)))


# Each kind declares its own fields (none inherited with a default: a record would keep the default).
class DiffPatch(_Entry, kw_only=True):
    """`kind: diff`: a diff that changes at least one file (and, optionally, whole files it adds)."""

    kind: ClassVar[Literal["diff"]] = "diff"
    diff: PatchFile  # parsed patches/NAME.patch
    overlay: tuple[str, ...] = ()  # repo paths of whole files this entry adds

    def __post_init__(self) -> None:
        if not self.diff.files:
            raise ValueError(f"{self.name}: a diff entry's diff must change a file")

    @property
    def files(self) -> tuple[str, ...]:
        return _written(self.diff, self.overlay)


class OverlayPatch(_Entry, kw_only=True):
    """`kind: overlay`: whole files added from overlay/ (at least one), optionally with a diff beside them."""

    kind: ClassVar[Literal["overlay"]] = "overlay"
    overlay: tuple[str, ...]
    diff: PatchFile | None = None

    def __post_init__(self) -> None:
        if not self.overlay:
            raise ValueError(f"{self.name}: an overlay entry must add a file")

    @property
    def files(self) -> tuple[str, ...]:
        return _written(self.diff, self.overlay)


class UpstreamedPatch(_Entry, kw_only=True):
    """`kind: upstreamed`: upstream has the change, so it writes nothing; a proof, the original change, or both
    show that a tree has it."""

    kind: ClassVar[Literal["upstreamed"]] = "upstreamed"
    proof: Proof | None = None
    original: PatchFile | None = None  # the change as it was carried, shown to reverse-apply

    def __post_init__(self) -> None:
        if self.proof is None and self.original is None:
            raise ValueError(f"{self.name}: an upstreamed entry needs a proof or its original change")

    @property
    def files(self) -> tuple[str, ...]:
        return ()

    def original_change(self) -> DiffPatch | None:
        """The original change as the diff entry it was, to reverse-apply it (None without one)."""
        if self.original is None or not self.original.files:
            return None
        common = {f.name: getattr(self, f.name) for f in fields(_Entry)}
        return DiffPatch(**common, diff=self.original)


# One type per kind: an entry's kind is its type (`match`/isinstance), never a string to compare.
Change = DiffPatch | OverlayPatch
Patch = DiffPatch | OverlayPatch | UpstreamedPatch


def patch_file(p: Patch) -> PatchFile | None:
    """The entry's file under patches/: its diff, or an upstreamed entry's original change."""
    return p.original if isinstance(p, UpstreamedPatch) else p.diff


KIND_TYPES: Mapping[str, type[Patch]] = {t.kind: t for t in (DiffPatch, OverlayPatch, UpstreamedPatch)}
KINDS = tuple(KIND_TYPES)


class ProfileVar(Record):
    """One variable of an env profile, with the reason for its value."""

    name: str
    value: str
    why: str


class EnvProfile(Record):
    """A named set of environment variables (`env_profiles:`), part of a fingerprint when chosen."""

    name: str
    description: str
    vars: tuple[ProfileVar, ...]

    def as_env(self) -> dict[str, str]:
        return {v.name: v.value for v in self.vars}


class Skipped(Record):
    """An entry `rebase --skip` left behind: not carried to this pin's release, kept here so it is not forgotten
    (the entry itself is in the pin it was carried from)."""

    name: str
    reason: str
    stop: str  # why the rebase stopped at it ("" for an entry dropped because it required a skipped one)
    release: str  # the release it could not be carried to
    source: str  # the pin's version it was carried from


class Manifest(Record):
    """A loaded, validated manifest: the pin, the patches in apply order, presets, env profiles, skipped entries."""

    path: Path
    schema: int
    pin: Pin
    patches: tuple[Patch, ...]
    presets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    env_profiles: Mapping[str, EnvProfile] = field(default_factory=dict)
    pin_source: Path | None = None  # the manifest that declares the pin (an `extends` chain shares its cache)
    skipped: tuple[Skipped, ...] = ()  # entries a rebase left behind (`rebase --skip`)

    @property
    def project_root(self) -> Path:
        return (self.pin_source or self.path).parent

    @cached_property
    def names(self) -> tuple[str, ...]:  # asked for once per patch by status and the set grammar: not rebuilt each time
        return tuple(p.name for p in self.patches)

    @cached_property
    def _by_name(self) -> dict[str, Patch]:
        # check looks patches up by name for each of its O(N) subsets of up to N patches: not a scan each time
        return {p.name: p for p in self.patches}

    def patch(self, name: str) -> Patch:
        if name in self._by_name:
            return self._by_name[name]
        raise ManifestError(
            f"{self.path}: no patch named {name!r}{_did_you_mean(name, self.names)}",
            hint=f"`{prog()} status` lists the patches",
        )

    def ordered(self, names: Iterable[str]) -> tuple[Patch, ...]:
        """The named patches in manifest order: the one order in which files are composed."""
        wanted = set(names)
        for n in wanted:
            self.patch(n)
        return tuple(p for p in self.patches if p.name in wanted)

    def changes(self, names: Iterable[str]) -> tuple[Change, ...]:
        """The named entries that write files, in manifest order (upstreamed entries change nothing)."""
        return tuple(p for p in self.ordered(names) if isinstance(p, Change))

    def check_carried(self, carried: Iterable[str], spelling: Spelling = CLI) -> None:
        """A tree carries an entry this manifest lacks (renamed, removed, another branch's manifest): said so with
        the way out, not "no patch named X" and a hint to look at status, which does not list it. `spelling`: the
        caller's way to revert (the command line's `revert --all`, the API's api.revert(all=True))."""
        gone = [n for n in carried if n not in self.names]
        if gone:
            raise ManifestError(
                f"the tree carries {', '.join(gone)}, which {self.path} does not name (renamed or removed since "
                "it was applied?)",
                hint=f"{spelling.run('revert --all', 'api.revert(all=True)')} takes the tree back to pristine without "
                "the entry (from the copies it saved), or put the entry back in the manifest and run the command again",
            )

    def preset(self, name: str) -> tuple[str, ...]:
        if name not in self.presets:
            raise ManifestError(
                f"{self.path}: no preset named {name!r}{_did_you_mean(name, self.presets)}",
                hint=f"presets: {', '.join(sorted(self.presets)) or '(none)'}",
            )
        return self.presets[name]

    def env_profile(self, name: str, *, spelling: Spelling = CLI) -> EnvProfile:
        """`spelling`: how the caller passed `name` (the command line's --env-profile, or the API's env_profile=)."""
        if not name.strip():  # `--env-profile "$PROFILE"` with PROFILE unset: not the same as no profile
            said, out = "--env-profile is empty (an unset shell variable?)", "leave --env-profile out"
            if not spelling.cli:  # a refusal names the argument the caller wrote, not an option it never typed
                said, out = f"{spelling.about('env_profile')} is empty", "pass env_profile=None"
            raise ManifestError(said, hint=f"name one of {', '.join(sorted(self.env_profiles)) or '(none)'}, or {out}")
        if name not in self.env_profiles:
            raise ManifestError(
                f"{self.path}: no env profile named {name!r}{_did_you_mean(name, self.env_profiles)}",
                hint=f"env profiles: {', '.join(sorted(self.env_profiles)) or '(none)'}",
            )
        return self.env_profiles[name]

    def closure(self, names: Iterable[str]) -> tuple[str, ...]:
        """`names` plus everything they require, transitively; refuses a set that holds a conflicting pair."""
        out: list[str] = []
        stack = list(names)
        while stack:
            n = stack.pop()
            if n in out:
                continue
            out.append(n)
            stack.extend(self.patch(n).requires)
        ordered = tuple(p.name for p in self.ordered(out))
        for p in self.ordered(ordered):
            for c in p.conflicts:
                if c in ordered:
                    raise ManifestError(
                        f"{p.name} conflicts with {c}: they cannot be applied together",
                        hint="revert one of them first, or choose another set",
                    )
        return ordered


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    import difflib  # only for a message: every command loads a manifest, few fail to

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Ctx:
    """Carries where we are in the file, so every message can say 'file: entry: key'."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, message: str, fix: str | None = None) -> ManifestError:
        return ManifestError(f"{self.path}: {where}: {message}", hint=fix)

    def check_keys(self, where: str, data: Mapping[Any, Any], allowed: tuple[str, ...]) -> None:
        for key in data:
            if key not in allowed:
                raise self.fail(
                    where,
                    f"key {key!r} is not known{_did_you_mean(str(key), allowed)}",
                    f"allowed keys here: {', '.join(allowed)}",
                )

    def mapping(self, where: str, value: Any) -> Mapping[Any, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        return value

    def optional_mapping(self, where: str, value: Any) -> Mapping[Any, Any]:
        """Absent (null) is empty; `env: []` or `upstream: ""` is a wrong type, not "none" (it had been read so)."""
        return {} if value is None else self.mapping(where, value)

    def string(self, where: str, value: Any) -> str:
        text = self.optional_string(where, value)
        if text is None or not text.strip():
            raise self.fail(where, f"expected a non-empty string, got {value!r}")
        return text

    def optional_string(self, where: str, value: Any) -> str | None:
        if value is None:
            return None
        # YAML reads 0.5.17 as a string but 1.0 as a float: accept numbers where a version is meant.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise self.fail(where, f"expected a non-empty string, got {value!r}")
        return value

    def string_list(self, where: str, value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(where, f"expected a list of strings, got {value!r}")
        return tuple(value)

    def name_list(self, where: str, value: Any) -> tuple[str, ...]:
        """A list of patch names (requires, conflicts, a preset): a name twice is a slip (a merge that kept both
        sides, a copy and paste), not a set; said, where it had passed without a word."""
        names = self.string_list(where, value)
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise self.fail(where, f"names {n!r} twice", f"list {n!r} once")
            seen.add(n)
        return names


def load_manifest(path: str | Path, *, spelling: Spelling = CLI) -> Manifest:
    """`spelling`: the caller's words for --manifest (the API's manifest=), for a manifest that is not there."""
    try:
        path = Path(path).resolve()
    except (RuntimeError, OSError) as e:  # Python 3.11 says a symlink loop with RuntimeError, 3.13 with ELOOP
        raise ManifestError(
            f"{path}: the manifest is a symbolic link that loops ({e})",
            hint="point the link at the real manifest.yaml (`ls -l` shows where it leads)",
        ) from None
    hit = manifestmemo.lookup(path)
    if isinstance(hit, Manifest):
        return hit
    reads, token = manifestmemo.recording()
    try:
        loaded = _load(path, seen=(), spelling=spelling)
    finally:
        manifestmemo.stop(token)
    manifestmemo.store(path, reads, loaded)
    return loaded


def _read_yaml(path: Path, spelling: Spelling) -> Any:
    manifestmemo.note(path)
    if path.exists() and not path.is_file() and not path.is_dir():  # reading a FIFO would wait forever
        raise ManifestError(f"{path}: not a regular file (a pipe or a device)", hint="name the manifest.yaml file")
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        fix = (
            "pass --manifest PATH or run from the project root"
            if spelling.cli
            else "pass manifest= the path of a manifest.yaml, or project= the directory that holds one"
        )
        raise ManifestError(f"{path}: manifest not found", hint=fix) from None
    except IsADirectoryError:
        raise ManifestError(
            f"{path}: is a directory, not a manifest file", hint="name the manifest.yaml inside it"
        ) from None
    except OSError as e:
        raise ManifestError(
            f"{path}: cannot read the manifest ({e.strerror})", hint="check the file's permissions"
        ) from e
    except UnicodeDecodeError as e:
        raise ManifestError(
            f"{path}: not UTF-8 text (byte {e.start}: {e.reason})", hint="save the manifest as UTF-8"
        ) from e
    return yamlfile.load(path, text)


def _load(path: Path, seen: tuple[Path, ...], spelling: Spelling) -> Manifest:
    ctx = _Ctx(path)
    data = _read_yaml(path, spelling)
    if not isinstance(data, Mapping):
        raise ctx.fail("top level", "expected a mapping with keys schema, pin, patches, ...")
    ctx.check_keys("top level", data, TOP_KEYS)
    schema = data.get("schema")
    if schema != SCHEMA_VERSION or type(schema) is not int:
        raise ctx.fail(
            "schema",
            f"schema {schema!r} is not supported (this tool reads schema {SCHEMA_VERSION})",
            "set `schema: 1`, or upgrade sglang-overlay",
        )

    parent: Manifest | None = None
    if "extends" in data:
        rel = _path_text(ctx, "extends", ctx.string("extends", data["extends"]))
        manifestmemo.note(path.parent / rel)  # the way there too: a link on it retargeted names another file
        parent_path = (path.parent / rel).resolve()
        if parent_path in seen or parent_path == path:
            raise ctx.fail("extends", f"{rel!r} extends itself (cycle through {parent_path})")
        parent = _load(parent_path, seen + (path,), spelling)

    pin_source: Path | None
    if "pin" in data:
        pin, pin_source = _parse_pin(ctx, data["pin"]), path
    elif parent:
        pin, pin_source = parent.pin, parent.pin_source
    else:
        raise ctx.fail("pin", "missing", "add a `pin:` with package, version, git_tag, wheel and sha256")

    raw_patches = data.get("patches", [])
    if raw_patches is None:
        raw_patches = []
    if not isinstance(raw_patches, list):
        raise ctx.fail("patches", f"expected a list of entries, got {type(raw_patches).__name__}")
    patches = list(parent.patches) if parent else []
    for i, raw in enumerate(raw_patches):
        patches.append(_parse_patch(ctx, i, raw))

    names = [p.name for p in patches]
    for n in names:
        if names.count(n) > 1:
            raise ctx.fail(
                f"patches ({n})", f"the name {n!r} is used by {names.count(n)} entries", "give each entry a unique name"
            )
    _validate_relations(ctx, patches)
    _validate_overlay_claims(ctx, patches)
    _validate_patch_file_claims(ctx, patches)

    presets = dict(parent.presets) if parent else {}
    for name, members in ctx.optional_mapping("presets", data.get("presets")).items():
        _check_name(ctx, f"presets.{name}", name)
        if name in names:
            raise ctx.fail(
                f"presets.{name}", f"{name!r} is also a patch's name", "rename the preset: a set names either one"
            )
        members = ctx.name_list(f"presets.{name}", members)
        for m in members:
            if m not in names:
                raise ctx.fail(f"presets.{name}", f"names unknown patch {m!r}{_did_you_mean(m, names)}")
        presets[str(name)] = members

    profiles = dict(parent.env_profiles) if parent else {}
    for name, raw in ctx.optional_mapping("env_profiles", data.get("env_profiles")).items():
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):  # `--env-profile` could not name it as written
            raise ctx.fail(f"env_profiles.{name}", f"{name!r} is not a valid name", _NAME_FIX.split(" (")[0])
        profiles[str(name)] = _parse_profile(ctx, str(name), raw)

    skipped = list(parent.skipped) if parent else []
    for name, raw in ctx.optional_mapping("skipped", data.get("skipped")).items():
        skipped.append(_parse_skipped(ctx, str(name), raw, names))

    manifest = Manifest(
        path=path,
        schema=schema,
        pin=pin,
        patches=tuple(patches),
        presets=presets,
        env_profiles=profiles,
        pin_source=pin_source,
        skipped=tuple(skipped),
    )
    for name, members in presets.items():
        try:
            manifest.closure(members)
        except ManifestError as e:
            raise ctx.fail(f"presets.{name}", str(e), "remove one of the conflicting patches from the preset") from e
    return manifest


def _parse_pin(ctx: _Ctx, raw: Any) -> Pin:
    raw = ctx.mapping("pin", raw)
    ctx.check_keys("pin", raw, PIN_KEYS)
    for key in PIN_KEYS:
        if key not in raw:
            raise ctx.fail("pin", f"key {key!r} is missing", f"the pin needs: {', '.join(PIN_KEYS)}")
    pin = Pin(**{k: ctx.string(f"pin.{k}", raw[k]) for k in PIN_KEYS})
    # Each becomes a directory name (.sglang/sglang-VERSION), a cache file name or a git argument: a NUL had
    # crashed fetch after the unpacking, a tag starting with '-' was read by git as an option.
    for key, rule, say in _PIN_RULES:
        value = getattr(pin, key)
        if not re.fullmatch(rule, value) or ".." in value:
            raise ctx.fail(f"pin.{key}", f"{value!r} is not {say}", "copy it from the release's PyPI page")
        if too_long(f"sglang-{value}"):
            raise ctx.fail(f"pin.{key}", f"{too_long(f'sglang-{value}')}", "copy it from the release's PyPI page")
    if not re.fullmatch(r"[0-9a-f]{64}", pin.sha256):
        raise ctx.fail(
            "pin.sha256", f"{pin.sha256!r} is not a sha256 hex digest", "copy the sha256 of the wheel (sha256sum FILE)"
        )
    if not pin.wheel.endswith(".whl") or not pin.wheel.startswith(f"{pin.package}-{pin.version}-"):
        raise ctx.fail("pin.wheel", f"{pin.wheel!r} is not a wheel of {pin.package} {pin.version}")
    return pin


_PIN_RULES = (
    ("package", r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", "a package name"),
    ("version", r"[0-9][0-9A-Za-z.+!_-]*", "a release version"),
    ("git_tag", r"[^-\s~^:?*\[\\\x00-\x1f\x7f][^\s~^:?*\[\\\x00-\x1f\x7f]*", "a git tag name"),
    ("wheel", r"[A-Za-z0-9][A-Za-z0-9._+!-]*", "a wheel file name"),
)


def _check_name(ctx: _Ctx, where: str, name: Any) -> None:
    """A patch's or a preset's name: what the set grammar can name (no '+', '-' or ',', not a word it reserves)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ctx.fail(where, f"{name!r} is not a valid name", _NAME_FIX)
    if name in EMPTY_NAMES:
        raise ctx.fail(where, f"{name!r} is reserved: a set expression reads it as the empty set", _NAME_FIX)


_NAME_FIX = "use lower-case letters, digits and underscores, starting with a letter (not none or pristine)"


def _conflicts(ctx: _Ctx, where: str, requires: tuple[str, ...], raw: Any) -> tuple[str, ...]:
    """A name in both lists is said here, at the key: the requirement check further on would only say the
    entry's requirements conflict, without naming the list or the slip (one of the two is a leftover)."""
    conflicts = ctx.name_list(f"{where}.conflicts", raw)
    for n in conflicts:
        if n in requires:
            raise ctx.fail(
                f"{where}.conflicts",
                f"names {n!r}, which {where}.requires names too",
                f"an entry either requires {n!r} or conflicts with it: drop it from one of the two lists",
            )
    return conflicts


def _parse_patch(ctx: _Ctx, index: int, raw: Any) -> Patch:
    where = f"patches[{index}]"
    raw = ctx.mapping(where, raw)
    name = raw.get("name")
    _check_name(ctx, f"{where}.name", name)
    where = f"patches[{index}] ({name})"
    ctx.check_keys(where, raw, PATCH_KEYS)
    for key in ("description", "kind", "category"):
        if key not in raw:
            raise ctx.fail(where, f"key {key!r} is missing")
    kind = ctx.string(f"{where}.kind", raw["kind"])
    if kind not in KINDS:
        raise ctx.fail(f"{where}.kind", f"{kind!r} is not one of {', '.join(KINDS)}{_did_you_mean(kind, KINDS)}")
    category = ctx.string(f"{where}.category", raw["category"])
    if category not in CATEGORIES:
        raise ctx.fail(f"{where}.category", f"{category!r} is not one of {', '.join(CATEGORIES)}")
    default = raw.get("default", False)
    if not isinstance(default, bool):
        raise ctx.fail(f"{where}.default", f"expected true or false, got {default!r}")
    requires = ctx.name_list(f"{where}.requires", raw.get("requires"))
    common = _Common(  # a dict at run time (typing is not imported then)
        name=name,
        description=ctx.string(f"{where}.description", raw["description"]),
        category=category,
        default=default,
        requires=requires,
        conflicts=_conflicts(ctx, where, requires, raw.get("conflicts")),
        env=_parse_env(ctx, where, raw.get("env")),
        cuda_capability=_parse_hardware(ctx, where, raw.get("hardware")),
        upstream=_parse_upstream(ctx, where, raw.get("upstream")),
        source_dir=ctx.path.parent,
    )
    rel = ctx.string(f"{where}.file", raw.get("file", f"patches/{name}.patch"))
    # Each kind takes what it may carry and refuses the rest, so its type holds only what makes sense.
    if kind == "upstreamed":
        if raw.get("overlay") is not None:
            raise ctx.fail(f"{where}.overlay", "an upstreamed entry adds no files", "remove `overlay`, or change kind")
        proof = _parse_proof(ctx, where, raw["proof"]) if raw.get("proof") is not None else None
        original = _read_diff(ctx, where, rel, required=False)
        if proof is None and original is None:
            raise ctx.fail(
                f"{where}.proof",
                "an upstreamed entry needs a proof",
                f"add `proof:` (file + symbols/contains), or keep the original change in {rel} so it can be "
                "shown to reverse-apply",
            )
        return UpstreamedPatch(**common, proof=proof, original=original)
    if raw.get("proof") is not None:
        raise ctx.fail(f"{where}.proof", f"only upstreamed entries carry a proof (this one is {kind})")
    overlay = _parse_overlay(ctx, where, raw.get("overlay"))
    diff = _read_diff(ctx, where, rel, required=kind == "diff")
    for f in diff.created if diff is not None else ():
        if f in overlay:
            raise ctx.fail(where, f"{f} is both created by the diff and listed in overlay")
    if kind == "overlay":
        if not overlay:
            raise ctx.fail(
                f"{where}.overlay", "kind overlay needs at least one file", "list the repo paths under overlay/"
            )
        return OverlayPatch(**common, overlay=overlay, diff=diff)
    if diff is None or not diff.files:
        raise ctx.fail(where, f"kind diff but {rel} changes no file")
    return DiffPatch(**common, diff=diff, overlay=overlay)


if TYPE_CHECKING:

    class _Common(TypedDict):
        """The fields every kind shares, parsed once (keyword arguments of each kind's constructor)."""

        name: str
        description: str
        category: str
        default: bool
        requires: tuple[str, ...]
        conflicts: tuple[str, ...]
        env: tuple[EnvVar, ...]
        cuda_capability: tuple[str, ...]
        upstream: Upstream
        source_dir: Path

else:
    _Common = dict


def _read_diff(ctx: _Ctx, where: str, rel: str, *, required: bool) -> PatchFile | None:
    """patches/NAME.patch parsed (None if absent and not required), its paths inside the package."""
    patch_path = _project_file(ctx, f"{where}.file", rel)
    if not required and not patch_path.exists():
        return None
    if not patch_path.is_file():
        raise ctx.fail(
            f"{where}.file",
            f"patch file {patch_path} {_missing(patch_path)}",
            f"create {rel} (a DEP-3 header, '---', then a git diff), or change the entry's kind",
        )
    diff = parse_patch_file(patch_path)
    for f in diff.files:
        check_patchable(f, f"{patch_path}")
    return diff


def _parse_overlay(ctx: _Ctx, where: str, raw: Any) -> tuple[str, ...]:
    overlay = tuple(
        check_patchable(p, f"{ctx.path}: {where}.overlay") for p in ctx.string_list(f"{where}.overlay", raw)
    )
    for i, p in enumerate(overlay):
        if p in overlay[:i]:
            # a second copy of the same file looked, at apply time, like upstream shipping a file of that name
            raise ctx.fail(f"{where}.overlay", f"{p} is listed twice", "list each file once")
        _check_overlay_source(ctx, where, ctx.path.parent / "overlay", ctx.path.parent / "overlay" / p)
        _project_file(ctx, f"{where}.overlay", f"overlay/{p}")  # overlay/ itself may be a link out
    return overlay


def _path_text(ctx: _Ctx, key: str, rel: str) -> str:
    """A path the manifest gives that the OS can take: no NUL (every use of it had crashed), no name too long."""
    if any(ord(c) < 32 or c == "\x7f" for c in rel):
        raise ctx.fail(key, f"{rel!r} holds a control character (a NUL, a newline, ...)", "name the file as it is")
    why = too_long(rel)
    if why:
        raise ctx.fail(key, why, "give the file a shorter name")
    return rel


def _project_file(ctx: _Ctx, key: str, rel: str) -> Path:
    """A file of the project that the manifest names, checked before it is read: it must lie in the manifest's
    directory once links are followed (a patch's `file: /etc/passwd`, `../..`, or a link out had been read)."""
    _path_text(ctx, key, rel)
    root = ctx.path.parent  # load_manifest resolved it
    path = root / rel
    manifestmemo.note(path)
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a looping link (3.11 says RuntimeError): the caller says it is no file
        return path
    if not real.is_relative_to(root):
        leads = "" if real == Path(os.path.normpath(path)) else f" (it leads to {real})"
        raise PathEscape(
            f"{ctx.path}: {key}: {rel!r} must be a path inside the project {root}{leads}",
            hint="keep the project's files under its directory (patches/NAME.patch, overlay/...): copy the file "
            "in instead of naming or linking it",
        )
    return path


def _parse_env(ctx: _Ctx, where: str, raw: Any) -> tuple[EnvVar, ...]:
    env = []
    for var, spec in ctx.optional_mapping(f"{where}.env", raw).items():
        if not ENV_NAME_RE.fullmatch(str(var)):
            raise ctx.fail(f"{where}.env", f"{var!r} is not an environment variable name")
        spec = ctx.mapping(f"{where}.env.{var}", spec)
        ctx.check_keys(f"{where}.env.{var}", spec, ENV_VAR_KEYS)
        forces = spec.get("sglang_forces")
        forces = ctx.string_list(f"{where}.env.{var}.sglang_forces", [forces] if isinstance(forces, str) else forces)
        if any(f != "always" and not f.startswith("--") for f in forces):
            raise ctx.fail(
                f"{where}.env.{var}.sglang_forces",
                f"expected `always` or server flags, got {list(forces)!r}",
                "e.g. `sglang_forces: always` or `sglang_forces: [--enable-symm-mem]`",
            )
        env.append(
            EnvVar(
                str(var),
                ctx.optional_string(f"{where}.env.{var}.default", spec.get("default", "")) or "",
                ctx.string(f"{where}.env.{var}.help", spec.get("help")),
                forces,
            )
        )
    return tuple(env)


def _parse_hardware(ctx: _Ctx, where: str, raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    hw = ctx.mapping(f"{where}.hardware", raw)
    ctx.check_keys(f"{where}.hardware", hw, HARDWARE_KEYS)
    raw_caps = [] if hw.get("cuda_capability") is None else hw["cuda_capability"]
    if not isinstance(raw_caps, list):
        raise ctx.fail(
            f"{where}.hardware.cuda_capability",
            f"expected a list, got {raw_caps!r}",
            "write it as a list of quoted strings: ['9.0', '10.0']",
        )
    for c in raw_caps:
        if not isinstance(c, str) or not re.fullmatch(r"\d+\.\d+", c):
            raise ctx.fail(
                f"{where}.hardware.cuda_capability",
                f"{c!r} is not a compute capability like '9.0'",
                "quote capabilities as strings: ['9.0', '10.0']",
            )
    return tuple(raw_caps)


def _parse_upstream(ctx: _Ctx, where: str, raw: Any) -> Upstream:
    up_raw = ctx.mapping(f"{where}.upstream", {"status": "not-forwarded"} if raw is None else raw)
    ctx.check_keys(f"{where}.upstream", up_raw, UPSTREAM_KEYS)
    status = ctx.string(f"{where}.upstream.status", up_raw.get("status"))
    if status not in UPSTREAM_STATUSES:
        raise ctx.fail(f"{where}.upstream.status", f"{status!r} is not one of {', '.join(UPSTREAM_STATUSES)}")
    pr = up_raw.get("pr")
    if pr is not None and (not isinstance(pr, int) or isinstance(pr, bool) or pr < 1):
        raise ctx.fail(f"{where}.upstream.pr", f"expected a pull-request number, got {pr!r}")
    return Upstream(
        status,
        ctx.optional_string(f"{where}.upstream.release", up_raw.get("release")),
        pr,
        ctx.optional_string(f"{where}.upstream.url", up_raw.get("url")),
    )


def _parse_proof(ctx: _Ctx, where: str, raw: Any) -> Proof:
    pr_raw = ctx.mapping(f"{where}.proof", raw)
    ctx.check_keys(f"{where}.proof", pr_raw, PROOF_KEYS)
    pfile = check_repo_path(ctx.string(f"{where}.proof.file", pr_raw.get("file")), f"{ctx.path}: {where}.proof.file")
    proof = Proof(
        pfile,
        ctx.string_list(f"{where}.proof.symbols", pr_raw.get("symbols")),
        ctx.string_list(f"{where}.proof.contains", pr_raw.get("contains")),
    )
    for key, items in (("symbols", proof.symbols), ("contains", proof.contains)):
        if any(not item.strip() for item in items):  # every file "contains" '': the proof held on any tree
            raise ctx.fail(
                f"{where}.proof.{key}", "holds an empty entry: it would prove nothing", "remove it, or write the text"
            )
    if not proof.symbols and not proof.contains:
        raise ctx.fail(
            f"{where}.proof",
            "names no symbols and no contains: it would prove nothing",
            "list the qualified names (symbols) or exact lines (contains) upstream must have",
        )
    return proof


def _missing(path: Path) -> str:
    """Why `path` is not a file to read: "does not exist" had been said of a directory or a pipe too."""
    if path.is_dir():
        return "is a directory, not a file"
    return "is not a regular file (a pipe, a device or a looping link)" if os.path.lexists(path) else "does not exist"


def _check_overlay_source(ctx: _Ctx, where: str, overlay_root: Path, src: Path) -> None:
    # A symlink inside overlay/ could smuggle in any file of the machine (or point the write elsewhere).
    rel = src.relative_to(overlay_root)
    probe = overlay_root
    for part in rel.parts:
        probe = probe / part
        if probe.is_symlink():
            raise PathEscape(
                f"{ctx.path}: {where}.overlay: {probe} is a symbolic link",
                hint="overlay/ must hold regular files; copy the file in instead of linking it",
            )
    if not src.is_file():
        raise ctx.fail(
            f"{where}.overlay",
            f"overlay file {src} {_missing(src)}",
            "add the file under overlay/ at its repository path, or remove it from the list",
        )


def _validate_relations(ctx: _Ctx, patches: list[Patch]) -> None:
    by_name = {p.name: p for p in patches}
    for p in patches:
        for key in ("requires", "conflicts"):
            for other in getattr(p, key):
                if other not in by_name:
                    raise ctx.fail(
                        f"patches ({p.name}).{key}", f"unknown patch {other!r}{_did_you_mean(other, by_name)}"
                    )
                if other == p.name:
                    raise ctx.fail(f"patches ({p.name}).{key}", "an entry cannot name itself")
    # requires cycles: a DFS with colours.
    colour: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        colour[n] = 1
        for r in by_name[n].requires:
            if colour.get(r) == 1:
                cycle = path[path.index(r) :] + [r] if r in path else [n, r]
                raise ctx.fail(
                    f"patches ({n}).requires", f"requires cycle: {' -> '.join(cycle)}", "remove one of these requires"
                )
            if colour.get(r) is None:
                visit(r, path + [r])
        colour[n] = 2

    for p in patches:
        if colour.get(p.name) is None:
            visit(p.name, [p.name])
    # A patch whose own requirements conflict can never be applied.
    for p in patches:
        need: set[str] = set()
        stack = [p.name]
        while stack:
            n = stack.pop()
            if n not in need:
                need.add(n)
                stack.extend(by_name[n].requires)
        for n in need:
            for c in by_name[n].conflicts:
                if c in need:
                    raise ctx.fail(
                        f"patches ({p.name})",
                        f"its requirements conflict: {n} conflicts with {c}",
                        "drop the conflict or the requirement",
                    )


def _validate_overlay_claims(ctx: _Ctx, patches: list[Patch]) -> None:
    owner: dict[str, str] = {}
    for p in patches:
        if not isinstance(p, Change):
            continue
        for f in p.files:
            if f in p.overlay or (p.diff is not None and f in p.diff.created):
                if f in owner:
                    raise ctx.fail(
                        f"patches ({p.name}).overlay",
                        f"{f} is already added by {owner[f]}",
                        "each added file belongs to exactly one entry; merge the entries or rename the file",
                    )
                owner[f] = p.name


def _validate_patch_file_claims(ctx: _Ctx, patches: list[Patch]) -> None:
    # `refresh` of one entry rewrites its file: an entry sharing it would change with it, unasked
    owner: dict[Path, str] = {}
    for p in patches:
        pf = patch_file(p)
        if pf is None:
            continue
        try:
            key = pf.path.resolve()
        except (OSError, RuntimeError):
            key = pf.path
        if key in owner:
            raise ctx.fail(
                f"patches ({p.name}).file",
                f"{pf.path} is also the patch file of {owner[key]}",
                "give each entry its own file (patches/NAME.patch): refresh of one would rewrite the other's",
            )
        owner[key] = p.name


def _parse_skipped(ctx: _Ctx, name: str, raw: Any, names: list[str]) -> Skipped:
    where = f"skipped.{name}"
    if not NAME_RE.fullmatch(name):
        raise ctx.fail("skipped", f"{name!r} is not a patch name")
    if name in names:
        raise ctx.fail(
            where, f"{name!r} is an entry of `patches:` again", f"remove `{name}:` from `skipped:` now that it is back"
        )
    raw = ctx.mapping(where, raw)
    ctx.check_keys(where, raw, SKIPPED_KEYS)
    return Skipped(
        name,
        ctx.string(f"{where}.reason", raw.get("reason")),
        ctx.optional_string(f"{where}.stop", raw.get("stop")) or "",
        ctx.string(f"{where}.release", raw.get("release")),
        ctx.string(f"{where}.from", raw.get("from")),
    )


def _parse_profile(ctx: _Ctx, name: str, raw: Any) -> EnvProfile:
    where = f"env_profiles.{name}"
    raw = ctx.mapping(where, raw)
    ctx.check_keys(where, raw, PROFILE_KEYS)
    out = []
    for var, spec in ctx.optional_mapping(f"{where}.vars", raw.get("vars")).items():
        if not ENV_NAME_RE.fullmatch(str(var)):
            raise ctx.fail(f"{where}.vars", f"{var!r} is not an environment variable name")
        if str(var) == "PYTHONPATH" or str(var).startswith("SGLANG_OVERLAY_"):
            # launch sets these itself (the patched tree first on the path; the set's fingerprint and profile
            # name): a profile's value would never reach the server, yet it would change the fingerprint
            raise ctx.fail(
                f"{where}.vars.{var}",
                f"{var} is set by launch itself, so a profile cannot set it",
                "remove it from the profile (for PYTHONPATH: export it before launch; launch keeps it after the "
                "tree's own entry)",
            )
        spec = ctx.mapping(f"{where}.vars.{var}", spec)
        ctx.check_keys(f"{where}.vars.{var}", spec, PROFILE_VAR_KEYS)
        if "value" not in spec:
            raise ctx.fail(f"{where}.vars.{var}", "key 'value' is missing")
        value = spec["value"]
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ctx.fail(f"{where}.vars.{var}.value", f"expected a string, got {value!r}", "quote the value")
        if "\0" in str(value):  # the environment of a process cannot hold one: launch would fail at exec
            raise ctx.fail(f"{where}.vars.{var}.value", "holds a NUL character", "remove it (an \\x00 or \\0 escape?)")
        out.append(ProfileVar(str(var), str(value), ctx.string(f"{where}.vars.{var}.why", spec.get("why"))))
    if not out:
        raise ctx.fail(where, "sets no variables")
    return EnvProfile(name, ctx.string(f"{where}.description", raw.get("description")), tuple(out))
