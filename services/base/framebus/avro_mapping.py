"""Frozen dataclasses <-> the record dicts fastavro writes and reads, derived from both sides.

A message type (`framebus.messages`) and its schema (`schemas/*.avsc`) name the same fields.
`RecordMapping` pairs them once, by name, and keeps a conversion only where the wire needs one:

- an enum is written as its member's name: the schema's symbols are the member names;
- a tuple of dataclasses is an array of records; a tuple of pairs an array of two-field records,
  the pair's items in the fields' order (a zone's points), or, when the schema says map and the
  pairs are (str, value), a map read back sorted by key; a tuple of anything else is an array,
  read back as a tuple;
- a dataclass field the schema does not name whose own fields the record names is flattened into
  the record (a tracked object's box);
- every other field (numbers, strings, bytes, optionals) goes as it is.

A schema field the dataclass lacks is written with the schema's default and skipped when read (a
newer reader schema's field); a dataclass field the schema lacks keeps its default.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from framebus.errors import CodecError

T = TypeVar("T")
Convert = Callable[[Any], Any]


class RecordMapping(Generic[T]):
    """One frozen dataclass type <-> the dicts of one Avro record schema.

    `to_avro(value)` may return the value's own `__dict__` (when nothing converts): read it, do
    not change it. `from_avro(record)` converts `record` in place: hand it a dict of its own.
    """

    def __init__(self, cls: type[T], schema: Mapping[str, Any]) -> None:
        self._cls = cls
        self._to: list[tuple[str, Convert]] = []
        self._from: list[tuple[str, Convert]] = []
        self._flat: list[tuple[str, RecordMapping[Any]]] = []
        hints = typing.get_type_hints(cls)
        avro = {f["name"]: f["type"] for f in schema["fields"]}
        names = []
        for field in _init_fields(cls):
            where, hint = f"{cls.__name__}.{field.name}", hints[field.name]
            if field.name in avro:
                to, from_ = _converters(hint, avro[field.name], where)
                if to is not None:
                    self._to.append((field.name, to))
                if from_ is not None:
                    self._from.append((field.name, from_))
            elif _flattened(hint, avro):
                self._flat.append((field.name, RecordMapping(hint, schema)))
            else:
                _check_defaulted(field, where)
                continue
            names.append(field.name)
        self._args = _positional(cls, names)
        # A record with nothing to convert is written as the value's own attribute dict.
        self.to_avro: Callable[[T], dict[str, Any]] = (
            self._converted if self._to or self._flat else vars
        )

    def _converted(self, value: T) -> dict[str, Any]:
        record = vars(value).copy()
        for name, convert in self._to:
            record[name] = convert(record[name])
        for name, inner in self._flat:
            record.update(inner.to_avro(record.pop(name)))
        return record

    def from_avro(self, record: dict[str, Any]) -> T:
        """The dataclass value of a record fastavro read (with the reader schema)."""
        for name, convert in self._from:
            record[name] = convert(record[name])
        for name, inner in self._flat:
            record[name] = inner.from_avro(record)
        return self._cls(*self._args(record))


def _init_fields(cls: type[Any]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.init]


def _check_defaulted(field: dataclasses.Field[Any], where: str) -> None:
    if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
        raise CodecError(f"{where}: the schema has no such field, and the dataclass no default")


def _flattened(hint: Any, avro: Mapping[str, Any]) -> bool:
    if not (dataclasses.is_dataclass(hint) and isinstance(hint, type)):
        return False
    return all(f.name in avro for f in _init_fields(hint))


def _positional(cls: type[Any], names: list[str]) -> Callable[[Mapping[str, Any]], Sequence[Any]]:
    """The constructor's arguments, by position: faster than by keyword (a frozen dataclass)."""
    init = [f.name for f in _init_fields(cls)]
    if names != init[: len(names)]:
        lacking = ", ".join(name for name in init if name not in names)
        raise CodecError(
            f"{cls.__name__}: the fields its schema lacks ({lacking}) come last in the dataclass: "
            "the others are passed by position"
        )
    return _items(names)


def _items(names: Sequence[str]) -> Callable[[Mapping[str, Any]], Sequence[Any]]:
    """A record's values of `names`, as a tuple (itemgetter of one name would give the value)."""
    if len(names) == 1:
        (name,) = names
        return lambda record: (record[name],)
    return operator.itemgetter(*names)


def _converters(hint: Any, avro: Any, where: str) -> tuple[Convert | None, Convert | None]:
    """How a field of Python type `hint` is written as and read from Avro type `avro` (None: as is)."""
    kind = avro.get("type") if isinstance(avro, dict) else None
    if isinstance(hint, type) and issubclass(hint, enum.Enum) and kind == "enum":
        if set(avro["symbols"]) != set(hint.__members__):
            raise CodecError(f"{where}: the enum's symbols must be the names of {hint.__name__}")
        # `_name_` is Enum's documented attribute behind `name`, read without a property call.
        return operator.attrgetter("_name_"), dict(hint.__members__).__getitem__
    if dataclasses.is_dataclass(hint) and isinstance(hint, type) and kind == "record":
        inner = RecordMapping(hint, avro)
        return inner.to_avro, inner.from_avro
    if typing.get_origin(hint) is tuple:
        converters = _tuple_converters(typing.get_args(hint), avro, kind, where)
        if converters is not None:
            return converters
    if kind in {"enum", "record", "array", "map"}:
        raise CodecError(f"{where}: framebus.avro_mapping maps no {hint} to an Avro {kind}")
    return None, None


def _tuple_converters(
    args: tuple[Any, ...], avro: Any, kind: str | None, where: str
) -> tuple[Convert | None, Convert | None] | None:
    if len(args) == 2 and args[1] is Ellipsis:
        item = args[0]
        if kind == "map" and typing.get_origin(item) is tuple and typing.get_args(item)[0] is str:
            _check_plain(typing.get_args(item)[1:], [avro["values"]], where)
            return dict, lambda pairs: tuple(sorted(pairs.items()))
        if kind == "array":
            to, from_ = _converters(item, avro["items"], where)
            return (
                None if to is None else lambda values: list(map(to, values)),
                tuple if from_ is None else lambda values: tuple(map(from_, values)),
            )
    elif kind == "record" and len(args) == len(avro["fields"]) == 2:
        first, second = (f["name"] for f in avro["fields"])
        _check_plain(args, [f["type"] for f in avro["fields"]], where)
        # A dict display: twice as fast as dict(zip(...)) for a two-item tuple.
        return lambda pair: {first: pair[0], second: pair[1]}, operator.itemgetter(first, second)
    return None


def _check_plain(hints: Sequence[Any], types: Sequence[Any], where: str) -> None:
    if any(_converters(h, t, where) != (None, None) for h, t in zip(hints, types, strict=True)):
        raise CodecError(f"{where}: the items of a tuple of pairs or points go as they are")
