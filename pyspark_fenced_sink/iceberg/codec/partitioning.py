"""The ``partition-by`` option: text <-> Iceberg partition spec (PROTOCOL.md step 0; driver and executors).

The grammar is Spark SQL's ``PARTITIONED BY`` list (``day(ts), bucket(16, user_id),
truncate(4, code), region``); partition field names follow Iceberg Java's
(``ts_day``, ``user_id_bucket``, ...). :func:`column_index` maps field ids to
Arrow column paths for the executors' partition split.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyiceberg.partitioning import PARTITION_FIELD_ID_START, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TimeTransform,
    Transform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
from pyiceberg.types import IcebergType, ListType, MapType, NestedField, StructType

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.options.write import PARTITION_BY

__all__ = ["ColumnRef", "column_index", "parse_partition_by", "same_partitioning", "spec_to_text"]

_TIME = {"year": YearTransform, "month": MonthTransform, "day": DayTransform, "hour": HourTransform}
_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour"}
_KNOWN = ("identity", "year", "month", "day", "hour", "bucket", "truncate", "void")
_ACCEPTS = {
    "year": "date, timestamp, timestamptz",
    "month": "date, timestamp, timestamptz",
    "day": "date, timestamp, timestamptz",
    "hour": "timestamp, timestamptz",
    "bucket": "int, long, decimal, date, time, timestamp, timestamptz, string, uuid, fixed, binary",
    "truncate": "int, long, decimal, string, binary",
    "identity": "any primitive type",
    "void": "any primitive type",
}
_SUFFIX = {"year": "_year", "month": "_month", "day": "_day", "hour": "_hour", "bucket": "_bucket",
           "truncate": "_trunc", "void": "_null", "identity": ""}  # fmt: skip
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(
    r"\s*(?:(?P<int>[+-]?\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|`(?P<quoted>(?:[^`]|``)*)`|(?P<op>[(),.]))"
)


@dataclass(frozen=True)
class ColumnRef:
    """A schema column as partitioning sees it.

    Attributes:
        path: Name segments from the top level (``element``/``key``/``value``
            inside lists and maps).
        field: The Iceberg field.
        in_collection: True when reached through a list or a map.
    """

    path: tuple[str, ...]
    field: NestedField
    in_collection: bool


def column_index(schema: Schema) -> dict[int, ColumnRef]:
    """Every field of ``schema`` by field id, with its path."""
    out: dict[int, ColumnRef] = {}

    def visit(t: IcebergType, path: tuple[str, ...], inside: bool) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                out[f.field_id] = ColumnRef((*path, f.name), f, inside)
                visit(f.field_type, (*path, f.name), inside)
        elif isinstance(t, ListType):
            out[t.element_id] = ColumnRef((*path, "element"), t.element_field, True)
            visit(t.element_type, (*path, "element"), True)
        elif isinstance(t, MapType):
            out[t.key_id] = ColumnRef((*path, "key"), t.key_field, True)
            out[t.value_id] = ColumnRef((*path, "value"), t.value_field, True)
            visit(t.key_type, (*path, "key"), True)
            visit(t.value_type, (*path, "value"), True)

    visit(schema.as_struct(), (), False)
    return out


def _quote(segment: str) -> str:
    return segment if _IDENT.fullmatch(segment) else "`" + segment.replace("`", "``") + "`"


def _render_path(path: tuple[str, ...]) -> str:
    return ".".join(_quote(s) for s in path)


def _error(message: str) -> InvalidOptionsError:
    return InvalidOptionsError(f"{PARTITION_BY}: {message}")


@dataclass(frozen=True)
class _Tok:
    kind: str  # "int", "name", "op"
    text: str
    value: str
    quoted: bool
    start: int
    end: int


def _tokenize(text: str) -> list[_Tok]:
    depth = 0
    for ch in re.sub(r"`(?:[^`]|``)*`", "", text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            break
    if depth != 0:
        raise _error(f"unbalanced parentheses in {text.strip()!r}")
    toks, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            bad = text[pos:].strip()[:20]
            raise _error(f"expected a column, a transform or ',' at {bad!r} in {text.strip()!r}")
        kind = m.lastgroup or "op"
        value = m.group(kind)
        if kind == "quoted":
            kind, value = "name", value.replace("``", "`")
        start = m.end() - len(m.group(0).lstrip())
        toks.append(_Tok(kind, m.group(0).strip(), value, m.lastgroup == "quoted", start, m.end()))
        pos = m.end()
    return toks


@dataclass(frozen=True)
class _Item:
    transform: str | None  # None: bare column (identity)
    args: tuple[tuple[str, ...] | int, ...]
    text: str


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self, offset: int = 0) -> _Tok | None:
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def take(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise _error(f"unexpected end of {self.text.strip()!r}")
        self.i += 1
        return tok

    def items(self) -> Iterator[_Item]:
        while self.peek() is not None:
            yield self.item()
            tok = self.peek()
            if tok is not None:
                if tok.value != ",":
                    raise _error(f"expected ',' before {tok.text!r} in {self.text.strip()!r}")
                self.take()
                if self.peek() is None:
                    raise _error(f"empty partition field after the last ',' in {self.text.strip()!r}")

    def column(self) -> tuple[str, ...]:
        segments = []
        while True:
            tok = self.take()
            if tok.kind != "name":
                raise _error(f"expected a column name, found {tok.text!r} in {self.text.strip()!r}")
            segments.append(tok.value)
            nxt = self.peek()
            if nxt is None or nxt.value != ".":
                return tuple(segments)
            self.take()

    def item(self) -> _Item:
        first = self.peek()
        if first is None or first.value == ",":
            raise _error(f"empty partition field in {self.text.strip()!r}")
        start = first.start
        nxt = self.peek(1)
        if first.kind == "name" and not first.quoted and nxt is not None and nxt.value == "(":
            self.i += 2
            args: list[tuple[str, ...] | int] = []
            while True:
                tok = self.peek()
                if tok is None:
                    raise _error(f"unbalanced parentheses in {self.text.strip()!r}")
                if tok.value == ")" and not args:
                    self.take()
                    break
                if tok.kind == "int":
                    args.append(int(self.take().value))
                else:
                    args.append(self.column())
                    after = self.peek()
                    if after is not None and after.value == "(":
                        raise _error(
                            f"expected a column or an integer as argument of {first.value!r}, found a "
                            f"nested transform in {self.text[start:].strip()!r}"
                        )
                sep = self.take()
                if sep.value == ")":
                    break
                if sep.value != ",":
                    raise _error(f"expected ',' or ')' before {sep.text!r} in {self.text.strip()!r}")
            end = self.toks[self.i - 1].end
            return _Item(first.value.lower(), tuple(args), self.text[start:end].strip())
        path = self.column()
        end = self.toks[self.i - 1].end
        return _Item(None, (path,), self.text[start:end].strip())


def _resolve(path: tuple[str, ...], schema: Schema, index: dict[int, ColumnRef], item: str) -> ColumnRef:
    by_path = {ref.path: ref for ref in index.values()}
    ref = by_path.get(path) or (by_path.get((".".join(path),)) if len(path) > 1 else None)
    if ref is not None:
        return ref
    try:  # pyiceberg's short names, e.g. "items.x" for "items.element.x"
        return index[schema.find_field(".".join(path)).field_id]
    except (ValueError, KeyError):
        pass
    wanted = ".".join(path).lower()
    twin = next((p for p in by_path if ".".join(p).lower() == wanted), None)
    if twin is not None:
        raise _error(
            f"unknown column {_render_path(path)!r} in {item!r}; the table has {_render_path(twin)!r}, "
            "which differs only in case (names are case-sensitive)"
        )
    names = [_render_path(r.path) for r in by_path.values() if not r.in_collection]
    shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    raise _error(f"unknown column {_render_path(path)!r} in {item!r}; expected one of: {shown}")


def _in_schema(name: str, schema: Schema) -> bool:
    try:
        schema.find_field(name)
    except ValueError:
        return False
    return True


def _transform_of(item: _Item) -> tuple[str, Transform[Any, Any], tuple[str, ...]]:
    name = _ALIASES.get(item.transform or "identity", item.transform or "identity")
    if name not in _KNOWN:
        raise _error(f"unknown transform {item.transform!r} in {item.text!r}; expected one of {', '.join(_KNOWN)}")
    ints = [a for a in item.args if isinstance(a, int)]
    cols = [a for a in item.args if not isinstance(a, int)]
    if name in ("bucket", "truncate"):
        what = "number of buckets" if name == "bucket" else "width"
        if len(item.args) != 2 or len(ints) != 1 or len(cols) != 1:
            raise _error(
                f"{name} takes 2 arguments ({what}, column), found {len(item.args)} in {item.text!r}; "
                f"e.g. {name}({16 if name == 'bucket' else 4}, col)"
            )
        if ints[0] <= 0:
            raise _error(f"{name} needs a positive {what}, found {ints[0]} in {item.text!r}")
        transform: Transform[Any, Any] = (
            BucketTransform(num_buckets=ints[0]) if name == "bucket" else TruncateTransform(width=ints[0])
        )
        return name, transform, cols[0]
    if len(item.args) == 1 and ints:
        raise _error(f"{name} takes 1 argument (a column), found the integer {ints[0]} in {item.text!r}")
    if len(item.args) != 1:
        raise _error(f"{name} takes 1 argument (a column), found {len(item.args)} in {item.text!r}")
    if name in _TIME:
        return name, _TIME[name](), cols[0]
    return name, (VoidTransform() if name == "void" else IdentityTransform()), cols[0]


def parse_partition_by(text: str, schema: Schema) -> PartitionSpec:
    """Parse the ``partition-by`` option into a spec bound to ``schema``.

    Args:
        text: E.g. ``"day(ts), bucket(16, user_id), region"``; blank means unpartitioned.
        schema: The table's schema (source ids come from it).

    Returns:
        A spec (id 0, field ids from 1000) for ``catalog.create_table(partition_spec=...)``.

    Raises:
        InvalidOptionsError: unknown column or transform, bad arguments, a
            transform the column's type does not support, a column inside a
            list or map, duplicate or redundant fields, bad syntax.
    """
    if not text or not text.strip():
        return PartitionSpec(spec_id=0)
    index = column_index(schema)
    fields: list[PartitionField] = []
    seen_fields: dict[tuple[int, str], str] = {}  # (source id, transform) -> item text
    seen_names: dict[str, str] = {}  # partition name -> item text
    time_source: dict[int, str] = {}  # source id -> item text of its time transform
    for item in list(_Parser(text).items()):  # all syntax errors before any semantic one
        name, transform, path = _transform_of(item)
        ref = _resolve(path, schema, index, item.text)
        shown = _render_path(ref.path)
        if ref.in_collection:
            raise _error(
                f"column {shown!r} in {item.text!r} is inside a list or map; expected a column reached "
                "through structs only (Iceberg cannot partition by list elements or map entries)"
            )
        source_type = ref.field.field_type
        if not source_type.is_primitive:
            kind = "struct" if source_type.is_struct else "list" if isinstance(source_type, ListType) else "map"
            raise _error(
                f"{name} cannot be applied to column {shown!r} in {item.text!r}: it is a {kind}; expected a "
                "primitive column (partition by one of its fields instead)"
            )
        if not transform.can_transform(source_type):
            raise _error(
                f"{name} cannot be applied to column {shown!r} of type {source_type} in {item.text!r}; "
                f"{name} accepts {_ACCEPTS[name]}"
            )
        field_name = ".".join(ref.path) + _SUFFIX[name]
        key = (ref.field.field_id, str(transform))
        if key in seen_fields:
            raise _error(
                f"duplicate partition field {item.text!r} (same as {seen_fields[key]!r}); list each partition "
                "field once"
            )
        if isinstance(transform, TimeTransform):
            if ref.field.field_id in time_source:
                raise _error(
                    f"{item.text!r} is redundant with {time_source[ref.field.field_id]!r}; expected at most "
                    "one of year, month, day, hour per column: keep the finest one"
                )
            time_source[ref.field.field_id] = item.text
        if field_name in seen_names:
            raise _error(
                f"{seen_names[field_name]!r} and {item.text!r} would both be named {field_name!r}; expected one "
                f"{name} transform per column: keep one of them"
            )
        if name != "identity" and _in_schema(field_name, schema):
            raise _error(
                f"partition field {field_name!r} for {item.text!r} has the name of a table column; expected "
                "partition names distinct from column names: rename that column"
            )
        seen_fields[key] = item.text
        seen_names[field_name] = item.text
        fields.append(
            PartitionField(
                source_id=ref.field.field_id,
                field_id=PARTITION_FIELD_ID_START + len(fields),
                transform=transform,
                name=field_name,
            )
        )
    return PartitionSpec(*fields, spec_id=0)


def spec_to_text(spec: PartitionSpec, schema: Schema) -> str:
    """Render ``spec`` in the ``partition-by`` syntax (round-trips through the parser).

    Partition field names and ids are not part of the text.
    """
    index = column_index(schema)
    parts = []
    for pf in spec.fields:
        ref = index.get(pf.source_id)
        col = _render_path(ref.path) if ref is not None else f"<dropped column id {pf.source_id}>"
        t = pf.transform
        if isinstance(t, IdentityTransform):
            parts.append(col)
        elif isinstance(t, BucketTransform):
            parts.append(f"bucket({t.num_buckets}, {col})")
        elif isinstance(t, TruncateTransform):
            parts.append(f"truncate({t.width}, {col})")
        elif isinstance(t, VoidTransform):
            parts.append(f"void({col})")
        else:
            parts.append(f"{t}({col})")
    return ", ".join(parts)


def same_partitioning(a: PartitionSpec, b: PartitionSpec) -> bool:
    """True when two specs partition the same way (same sources and transforms, in order).

    Names, field ids and spec ids are ignored.
    """
    return [(f.source_id, str(f.transform)) for f in a.fields] == [(f.source_id, str(f.transform)) for f in b.fields]
