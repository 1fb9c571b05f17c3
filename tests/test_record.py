"""sglang_overlay.record against what the package relied on from dataclasses, and the import it saves."""

import copy
import pickle
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from sglang_overlay.record import FrozenError, Record, asdict, field, fields, replace

ROOT = Path(__file__).resolve().parents[1]


class Point(Record):
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
    kind: ClassVar[str] = "point"


class Base(Record, kw_only=True):
    name: str
    size: int = 1


class Child(Base, kw_only=True):
    body: str
    seen: set[str] = field(default_factory=set, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.body:
            raise ValueError(f"{self.name}: empty body")


class Bag(Record, frozen=False):
    items: list[int] = field(default_factory=list)


def test_init_positional_keyword_and_defaults():
    assert (Point(1).x, Point(1).y, Point(1, 2).y, Point(y=3, x=4).x) == (1, 0, 2, 4)
    assert Point.kind == "point" and [f.name for f in fields(Point)] == ["x", "y", "tags"]
    with pytest.raises(TypeError, match="missing required argument 'x'"):
        Point()
    with pytest.raises(TypeError, match="multiple values"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=2)
    with pytest.raises(TypeError, match="positional"):
        Point(1, 2, (), 4)


def test_kw_only_inheritance_post_init_and_factories():
    c = Child(name="a", body="b")
    assert (c.name, c.size, c.body, c.seen) == ("a", 1, "b", set())
    assert [f.name for f in fields(Child)] == ["name", "size", "body", "seen"]
    with pytest.raises(TypeError):
        Child("a", "b")  # type: ignore[misc]
    with pytest.raises(ValueError, match="a: empty body"):
        Child(name="a", body="")
    assert Child(name="a", body="b").seen is not c.seen  # one set per record, not shared


def test_equality_hash_and_repr_as_dataclasses():
    assert Point(1, 2) == Point(1, 2) and Point(1, 2) != Point(2, 1)
    assert hash(Point(1, 2)) == hash(Point(1, 2)) and len({Point(1), Point(1)}) == 1
    assert Point(1) != (1, 0, ()) and Child(name="a", body="b") != Base(name="a")
    c1, c2 = Child(name="a", body="b"), Child(name="a", body="b")
    c1.seen.add("x")  # a field left out of comparison, mutable inside a frozen record
    assert c1 == c2 and hash(c1) == hash(c2)
    assert repr(Point(1, tags=("t",))) == "Point(x=1, y=0, tags=('t',))"
    assert repr(c1) == "Child(name='a', size=1, body='b')"


def test_frozen_refuses_assignment_and_mutable_records_allow_it():
    p = Point(1)
    with pytest.raises(FrozenError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y
    b = Bag()
    b.items.append(1)
    b.items = [2]
    assert b == Bag([2]) and Bag().items is not Bag().items
    with pytest.raises(TypeError):
        hash(b)


def test_replace_checks_again_and_asdict_recurses():
    c = Child(name="a", body="b")
    assert replace(c, size=3) == Child(name="a", size=3, body="b")
    with pytest.raises(ValueError):
        replace(c, body="")
    assert replace(Point(1, 2), y=5) == Point(1, 5)
    assert asdict(Point(1, tags=("t",))) == {"x": 1, "y": 0, "tags": ("t",)}
    nested = Bag([Point(1), Point(2)])  # type: ignore[list-item]
    assert asdict(nested) == {"items": [{"x": 1, "y": 0, "tags": ()}, {"x": 2, "y": 0, "tags": ()}]}
    assert c.__replace__(size=2) == Child(name="a", size=2, body="b")  # what copy.replace calls (3.13)


def test_a_field_declared_again_keeps_its_bases_default():
    class Sub(Point):
        y: int

    assert Sub(1).y == 0 and [f.name for f in fields(Sub)] == ["x", "y", "tags"]


def test_pickle_and_copy_keep_value_and_type():
    c = Child(name="a", body="b")
    for back in (pickle.loads(pickle.dumps(c)), copy.copy(c), copy.deepcopy(c)):
        assert back == c and type(back) is Child
        with pytest.raises(FrozenError):
            back.name = "z"  # type: ignore[misc]


def test_bad_classes_are_refused_when_defined():
    with pytest.raises(TypeError, match="without a default follows"):

        class Bad(Record):
            a: int = 0
            b: int

    with pytest.raises(TypeError, match="frozen"):

        class Thaw(Point, frozen=False):
            z: int = 0


def test_match_by_position():
    match Point(1, 2):
        case Point(1, y):
            assert y == 2
        case _:
            pytest.fail("no match")


def test_commands_never_import_dataclasses(sglang_tree):
    """Where `status` lost ~20 ms: a module on these paths that imports dataclasses or inspect (and, for status and
    --version, typing or ast) again fails here. Modules the interpreter's site had loaded do not count."""
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "sys.argv = ['apply.py', *sys.argv[1:]]\n"
        "try:\n    exec(compile(open('apply.py').read(), 'apply.py', 'exec'), {'__name__': '__main__', '__file__': 'apply.py'})\n"
        "except SystemExit as e:\n    rc = e.code\n"
        "new = {'dataclasses', 'inspect', 'typing', 'ast'} & (set(sys.modules) - before)\n"
        "print(rc, sorted(new), file=sys.stderr)\n"
    )
    for argv in (["apply", "--all"], ["status"], ["--version"], ["revert", "--all"]):
        args = argv if argv == ["--version"] else ["--tree", str(sglang_tree), *argv]
        r = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
        said = r.stderr.strip().splitlines()[-1]
        assert said.startswith("0 [") and "dataclasses" not in said and "inspect" not in said, (argv, r.stderr)
        if argv[0] in ("status", "--version"):
            assert said == "0 []", (argv, r.stderr)
