"""Reading the files users hand us (topologies, plans, state files) without being fooled by them.

Both parsers stay libraries' work: YAML goes through libyaml's event parser (`yaml.CSafeLoader`'s
C half, fast on a 10 MB file), JSON through the standard library. What is hand-written here is
only what they leave open and users hit:

* text must be UTF-8 (a latin-1, UTF-16 or binary file gets a message saying so, not a
  UnicodeDecodeError);
* a key repeated in one mapping is an error (PyYAML and `json` silently keep the last one);
* nesting is bounded: libyaml's own composer recurses in C and crashes the interpreter on a
  document nested ~100 000 deep, so a first pass over the parser's events measures the depth and
  only a document within `MAX_DEPTH` reaches the composer. The two passes cost about 9 s on a
  10 MB file where composing in Python cost about 28 s;
* aliases are bounded: PyYAML shares an aliased node instead of copying it, so a "billion
  laughs" document (anchors that repeat anchors) loads fast, then hangs whatever walks or prints
  it. The same first pass counts the nodes the document holds once every alias is expanded and
  refuses one that expands past `MAX_EXPANDED_NODES` and `MAX_EXPANSION` times its own size;
* the garbage collector is paused while a document is built (it otherwise rescans the growing
  object graph over and over: a 10 MB topology took 4x longer with it running).

Every problem is an `InputError` naming the file, where in it, and what is wrong.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml: the pure-Python loader, slower
    CParser = None

MAX_DEPTH = 64  # topology and plan files nest about 6 levels; anything deeper is not ours
# Aliases may repeat a block (`<<: *defaults`), but not multiply the document: refuse one that
# expands beyond both bounds.
MAX_EXPANDED_NODES = 1_000_000
MAX_EXPANSION = 10
_MERGE_TAG = "tag:yaml.org,2002:merge"


class InputError(Exception):
    """A file or argument that cannot be used; the message is meant for the user as it is."""

    def __init__(self, source: str, where: str, problem: str):
        self.source, self.where, self.problem = source, where, problem
        location = f" at {_printable(where)}" if where else ""
        super().__init__(f"{source}{location}: {problem}")


def _printable(text: str) -> str:
    """`text` with control characters escaped: a location names the user's nodes, and a name
    with a line break in it must not break the one-line message."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def read_text(path: str | Path, error: type[InputError] = InputError) -> str:
    """The file's text, which must be UTF-8 (a UTF-8 byte-order mark is allowed)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise error(str(path), "", f"cannot read the file ({exc.strerror})") from None
    return decode(raw, str(path), error)


def decode(raw: bytes, source: str, error: type[InputError] = InputError) -> str:
    """UTF-8 bytes → text, or an error saying which byte is not UTF-8."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        hint = (
            " (it starts with a UTF-16 byte-order mark)"
            if raw[:2] in (b"\xff\xfe", b"\xfe\xff")
            else ""
        )
        raise error(
            source,
            f"line {line}",
            f"the file is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start} cannot be decoded{hint}; save it as UTF-8",
        ) from None


@contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _UniqueKeys(SafeConstructor, Resolver):
    """Safe construction with unique keys, and tag resolution cached for recurring scalars."""

    def __init__(self) -> None:
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.tags: dict[tuple, str] = {}

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        return None if node is None else self.construct_document(node)

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        # The same few plain scalars (numbers, roles, tiers) recur thousands of times.
        if kind is not ScalarNode:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = self.tags.get(key)
        if tag is None:
            tag = self.tags[key] = super().resolve(kind, value, implicit)
        return tag

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        if not isinstance(node, MappingNode):
            return super().construct_mapping(node, deep=deep)
        own = [key for key, _value in node.value if key.tag != _MERGE_TAG]
        merges = len(own) < len(node.value)
        mapping = super().construct_mapping(node, deep=deep)  # merges `<<` keys into node.value
        if merges or len(mapping) < len(own):  # a repeated key, or merged ones that may hide one
            self._check_unique(node, own)
        return mapping

    def _check_unique(self, node: MappingNode, own: list) -> None:
        seen: set = set()
        for key_node in own:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)


class _Refused(yaml.composer.ComposerError):
    """Well-formed YAML that we refuse to compose (too deep, too many aliases)."""


def _too_deep(mark: Any) -> yaml.composer.ComposerError:
    return _Refused(None, None, f"the document is nested more than {MAX_DEPTH} levels deep", mark)


class _PythonLoader(Reader, Scanner, Parser, Composer, _UniqueKeys):  # type: ignore[misc]
    """PyYAML's pure-Python reader, parser and composer."""

    def __init__(self, stream: str):
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _UniqueKeys.__init__(self)


if CParser is not None:

    class _LibyamlLoader(CParser, _UniqueKeys):  # type: ignore[misc, valid-type]
        """libyaml's parser and composer; only for documents `_check_shape` let through."""

        def __init__(self, stream: str):
            CParser.__init__(self, stream)
            _UniqueKeys.__init__(self)


class _EventParser(Reader, Scanner, Parser):
    """PyYAML's pure-Python parser alone, for the first pass when libyaml is missing."""

    def __init__(self, stream: str):
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)


def _check_shape(text: str) -> None:
    """Walk the parser's events once, before the composer sees the document: bounded depth
    (libyaml's composer recurses in C) and bounded alias expansion."""
    parser = CParser(text) if CParser is not None else _EventParser(text)
    opening = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    closing = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    # Per open collection: [anchor, nodes it holds with aliases expanded]; `anchored` keeps
    # the expanded size of every anchored node seen so far.
    open_: list[list] = [[None, 0]]
    anchored: dict[str, int] = {}
    written = 0
    try:
        while (event := _next_event(parser)) is not None:
            kind = event.__class__
            if kind in opening:
                if len(open_) > MAX_DEPTH:
                    raise _too_deep(event.start_mark)
                open_.append([event.anchor, 1])
                written += 1
                continue
            if kind in closing:
                anchor, size = open_.pop()
            elif kind is yaml.ScalarEvent:
                anchor, size = event.anchor, 1
                written += 1
            elif kind is yaml.AliasEvent:
                anchor, size = None, anchored.get(event.anchor, 1)
            else:
                continue
            if anchor is not None:
                anchored[anchor] = size
            open_[-1][1] += size
            if open_[-1][1] > MAX_EXPANDED_NODES and open_[-1][1] > MAX_EXPANSION * written:
                raise _expands_too_much(event.start_mark, written)
    finally:
        if CParser is not None:
            parser.dispose()


def _expands_too_much(mark: Any, written: int) -> yaml.composer.ComposerError:
    return _Refused(
        None,
        None,
        f"aliases expand the document past {MAX_EXPANDED_NODES:,} nodes, more than "
        f"{MAX_EXPANSION} times the {written:,} it writes out; repeat fewer aliased blocks",
        mark,
    )


def _next_event(parser: Any) -> Any:
    """The parser's next event. The libyaml in newer PyYAML wheels (6.0.4 here) has a nesting
    limit of its own that it hits while scanning ahead of the first event: it reads as ours."""
    try:
        if CParser is None:
            return parser.get_event() if parser.check_event() else None
        return parser.get_event()
    except yaml.YAMLError as exc:
        if "nesting depth" in str(getattr(exc, "problem", "")):
            raise _too_deep(exc.problem_mark) from None
        raise


def _loader(text: str) -> Any:
    _check_shape(text)
    return _PythonLoader(text) if CParser is None else _LibyamlLoader(text)


def parse_yaml(text: str, source: str, error: type[InputError] = InputError) -> Any:
    """One YAML document, strictly; a syntax problem names its line and column."""
    loader = None
    try:
        with _gc_paused():
            loader = _loader(text)
            return loader.get_single_data()
    except yaml.reader.ReaderError as exc:
        raise error(
            source,
            f"character {exc.position}",
            f"YAML syntax error: {exc.reason} (#x{exc.character:04x})",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        kind = "YAML refused" if isinstance(exc, _Refused) else "YAML syntax error"
        raise error(source, where, f"{kind}: {problem}") from None
    finally:
        if loader is not None:
            loader.dispose()


def parse_json(text: str, source: str, error: type[InputError] = InputError) -> Any:
    """A JSON document, strictly: no repeated keys, no NaN/Infinity, bounded nesting."""
    try:
        with _gc_paused():
            return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise error(
            source, f"line {exc.lineno}, column {exc.colno}", f"not JSON ({exc.msg})"
        ) from None
    except _JsonProblem as exc:
        raise error(source, "", f"not valid JSON for us: {exc}") from None
    except RecursionError:
        raise error(source, "", "the JSON document is nested too deeply") from None


class _JsonProblem(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JsonProblem(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _JsonProblem(f"{name} is not a JSON number")


def plain_error(err: Any) -> str:
    """pydantic's message for one error, with the offending value when it is short."""
    if err["type"] == "missing":
        return "this required field is missing"
    if err["type"] == "extra_forbidden":
        return "unknown field"
    text = err["msg"].removeprefix("Value error, ")
    value = err.get("input")
    if isinstance(value, (bool, int, float, str)) and err["type"] not in ("value_error",):
        shown = repr(value)
        text += f" (got {shown if len(shown) <= 40 else shown[:37] + '...'})"
    return text
