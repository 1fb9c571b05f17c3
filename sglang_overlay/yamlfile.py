"""A manifest's YAML text -> plain data (safe loader, no duplicate keys, no alias bombs), cached by its bytes."""

from __future__ import annotations

import functools
from pathlib import Path

from .errors import ManifestError
from .parsecache import cached

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:  # imported where a text is parsed: a cache hit needs no PyYAML
    from typing import Any

    import yaml

# A manifest is a few hundred nodes. These bounds refuse "billion laughs" alias bombs and deep nesting before
# anything walks the data (an expanded bomb would hang every command that reads the manifest).
MAX_ALIASES = 100  # values reached again through an alias: what an expansion adds (the text's own are parsed)
MAX_DEPTH = 64


def load(path: Path, text: str) -> Any:
    """The data of `text` (read from `path`, named in errors), from the cache when this text parsed before."""
    return cached("manifest", text, lambda: parse(path, text))


# ------------------------------------------------------------------------------------------------ parsing
def parse(path: Path, text: str) -> Any:
    import yaml

    loader = _strict_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(path, node)
        return loader.construct_document(node)
    except _duplicate_key() as e:
        raise ManifestError(
            f"{path}: line {e.again.line + 1}: duplicate key {e.key!r} (first at line {e.first.line + 1})",
            hint="keep one of them: YAML would silently use the last one",
        ) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise ManifestError(
            f"{path}: not valid YAML at {where}: {getattr(e, 'problem', e)}",
            hint="fix the YAML syntax (indentation, quoting) at that line",
        ) from e
    finally:
        loader.dispose()


@functools.cache
def _duplicate_key() -> Any:  # a yaml.YAMLError subclass, made once yaml is imported
    import yaml

    class DuplicateKey(yaml.YAMLError):
        def __init__(self, key: object, first: yaml.Mark, again: yaml.Mark) -> None:
            super().__init__(f"duplicate key {key!r}")
            self.key, self.first, self.again = key, first, again

    return DuplicateKey


@functools.cache
def _strict_loader() -> Any:  # a yaml loader class, made once yaml is imported
    import yaml

    duplicate = _duplicate_key()

    # libyaml where it is built in: a base chosen at run time, which mypy cannot follow
    class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        """The safe loader, refusing a key given twice in one mapping (YAML would silently keep the last)."""

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            if isinstance(node, yaml.MappingNode):
                first: dict[Any, Any] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        seen = first.setdefault(key, key_node.start_mark)
                    except TypeError:
                        continue  # an unhashable key: the base class says so
                    if seen is not key_node.start_mark:
                        raise duplicate(key, seen, key_node.start_mark)
            mapping: dict[Any, Any] = super().construct_mapping(node, deep)  # the base is Any to mypy
            return mapping

    return StrictLoader


def _check_size(path: Path, root: yaml.Node) -> None:
    """Walk the node graph as the data would expand, stopping at the first bound it crosses."""
    import yaml

    seen: set[int] = set()
    aliases = 0  # only what aliases expand counts: a long manifest without any (8000 entries) is no bomb
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        line = node.start_mark.line + 1
        if id(node) in seen:
            aliases += 1
        seen.add(id(node))
        problem = (
            f"more than {MAX_ALIASES} alias uses"
            if aliases > MAX_ALIASES
            else f"nesting deeper than {MAX_DEPTH} levels"
            if depth > MAX_DEPTH
            else None
        )
        if problem:
            raise ManifestError(
                f"{path}: line {line}: the YAML holds {problem}; a manifest needs none of that",
                hint="write the entries out (aliases `*name` and anchors `&name` are rarely needed in a manifest)",
            )
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((child, depth + 1) for pair in node.value for child in pair)
