"""Typed records, frozen unless a class says `frozen=False`: the part of `dataclasses` this package uses.

`dataclasses` cost every command ~16 ms: its import (inspect, ast, dis, tokenize) and the exec of each
class's generated methods. `status` took 1.29x StGit's `stg series` with it (issue 40). On that path `typing` is
imported only by the type checker (`TYPE_CHECKING = False`, which mypy reads as true): another ~3 ms.
A record is a plain class: `class Pin(Record):` with annotated fields, `kw_only=True` and `frozen=False` as class
keywords, `field(...)` for factories and fields left out of comparison. It pickles and copies as dataclasses did.
"""

from __future__ import annotations

import itertools
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar, dataclass_transform

    R = TypeVar("R", bound="Record")
else:

    def dataclass_transform(**_: object) -> object:  # what mypy reads; nothing to do at run time
        return lambda cls: cls


_MISSING: Any = object()


class FrozenError(AttributeError):
    """An assignment to a frozen record (as dataclasses.FrozenInstanceError)."""


class Field:
    """One field of a record class, in declaration order (inherited fields first)."""

    __slots__ = ("compare", "default", "factory", "kw_only", "name", "repr")

    def __init__(self, name: str, default: Any, factory: Any, kw_only: bool, compare: bool, repr: bool) -> None:
        self.name, self.default, self.factory = name, default, factory
        self.kw_only, self.compare, self.repr = kw_only, compare, repr


class _Spec:
    __slots__ = ("compare", "default", "factory", "kw_only", "repr")

    def __init__(self, default: Any, factory: Any, kw_only: bool | None, compare: bool, repr: bool) -> None:
        self.default, self.factory, self.kw_only, self.compare, self.repr = default, factory, kw_only, compare, repr


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] = _MISSING,
    kw_only: bool | None = None,
    compare: bool = True,
    repr: bool = True,
) -> Any:
    """A field's options: a default or a factory, keyword-only, left out of ==, hash and repr."""
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("a field takes a default or a default_factory, not both")
    return _Spec(default, default_factory, kw_only, compare, repr)


def _is_classvar(annotation: object) -> bool:
    # annotations are strings here (`from __future__ import annotations`); dataclasses reads them the same way
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    typing = sys.modules.get("typing")  # a ClassVar object: its module imported typing already
    return typing is not None and typing.ClassVar in (annotation, getattr(annotation, "__origin__", None))


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Record:
    """Base of every record: __init__, ==, hash (frozen only), repr and immutability from the annotated fields."""

    __record_fields__: ClassVar[tuple[Field, ...]] = ()
    __record_positional__: ClassVar[tuple[str, ...]] = ()
    __record_frozen__: ClassVar[bool] = True
    __record_post_init__: ClassVar[bool] = False

    def __init_subclass__(cls, *, frozen: bool = True, kw_only: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        bases = [b for b in cls.__mro__[1:] if issubclass(b, Record) and b is not Record]
        if bases and bases[0].__record_frozen__ != frozen:
            raise TypeError(f"{cls.__name__}: a record cannot be frozen={frozen} over one that is not")
        fields = {f.name: f for f in (bases[0].__record_fields__ if bases else ())}
        own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 (inspect.get_annotations: the import it saves)
        for name, annotation in own.items():
            if _is_classvar(annotation):
                continue
            spec = getattr(cls, name, _MISSING)  # as dataclasses: a base's default holds for a field declared again
            if isinstance(spec, _Spec):
                own_kw = kw_only if spec.kw_only is None else spec.kw_only
                f = Field(name, spec.default, spec.factory, own_kw, spec.compare, spec.repr)
                if spec.default is _MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, spec.default)
            else:
                f = Field(name, spec, _MISSING, kw_only, True, True)
            fields[name] = f  # one declared again keeps its place, as in dataclasses
        positional = [f for f in fields.values() if not f.kw_only]
        for a, b in itertools.pairwise(positional):
            if _has_default(a) and not _has_default(b):
                raise TypeError(f"{cls.__name__}: field {b.name!r} without a default follows one with a default")
        cls.__record_fields__ = tuple(fields.values())
        cls.__record_positional__ = tuple(f.name for f in positional)
        cls.__record_frozen__ = frozen
        cls.__record_post_init__ = hasattr(cls, "__post_init__")
        cls.__match_args__ = cls.__record_positional__  # type: ignore[attr-defined, misc]  # `case Pin(pkg, version)`
        if "__eq__" not in cls.__dict__ and "__hash__" not in cls.__dict__:
            cls.__hash__ = Record.__hash__ if frozen else None  # type: ignore[assignment]
        if not frozen and cls.__setattr__ is Record.__setattr__:
            cls.__setattr__ = object.__setattr__  # type: ignore[method-assign, assignment]
            cls.__delattr__ = object.__delattr__  # type: ignore[method-assign]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        positional = cls.__record_positional__
        if len(args) > len(positional):
            raise TypeError(f"{cls.__name__}() takes {len(positional)} positional arguments, {len(args)} given")
        values = self.__dict__
        values.update(zip(positional, args))
        for f in cls.__record_fields__:
            name = f.name
            if name in kwargs:
                if name in values:
                    raise TypeError(f"{cls.__name__}() got multiple values for {name!r}")
                values[name] = kwargs.pop(name)
            elif name not in values:
                if f.default is not _MISSING:
                    values[name] = f.default
                elif f.factory is not _MISSING:
                    values[name] = f.factory()
                else:
                    raise TypeError(f"{cls.__name__}() missing required argument {name!r}")
        if kwargs:
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {next(iter(kwargs))!r}")
        if cls.__record_post_init__:
            self.__post_init__()  # type: ignore[attr-defined]

    def __replace__(self, **changes: Any) -> Record:  # copy.replace (Python 3.13)
        return replace(self, **changes)

    def _record_compared(self) -> tuple[Any, ...]:
        d = self.__dict__
        return tuple(d[f.name] for f in self.__record_fields__ if f.compare)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._record_compared() == other._record_compared()

    def __hash__(self) -> int:
        return hash(self._record_compared())

    def __repr__(self) -> str:
        d = self.__dict__
        shown = ", ".join(f"{f.name}={d[f.name]!r}" for f in self.__record_fields__ if f.repr)
        return f"{type(self).__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")


def _has_default(f: Field) -> bool:
    return f.default is not _MISSING or f.factory is not _MISSING


def fields(record: Record | type[Record]) -> tuple[Field, ...]:
    """The fields of a record or record class, in order."""
    return record.__record_fields__


def replace(record: R, **changes: Any) -> R:
    """A copy with some fields changed; __post_init__ checks it again."""
    return type(record)(**{**{f.name: getattr(record, f.name) for f in record.__record_fields__}, **changes})


def asdict(record: Record) -> dict[str, Any]:
    """The fields by name, records inside lists, tuples and dicts made dicts too (as dataclasses.asdict)."""
    return {f.name: _plain(getattr(record, f.name)) for f in record.__record_fields__}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value
