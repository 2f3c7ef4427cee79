"""One codec for what the ledger stores as JSON (the job, the handle): a strict cattrs
converter, so a row written by this eps reads back as the same record and a row
that does not fit says where (``$.duration_s``).

Every ``eps status`` reads the job of each row it shows, and the handle of each live one;
cattrs costs about 15 ms of such a command (its import, the converter, the code it
generates on first use).  So the two records the ledger stores have a direct path: a
document whose every value already has its field's exact JSON type (what
:func:`job_to_json` and :func:`handle_to_json` write) is read field by field; anything
else (a missing field, an extra key, a string where a number belongs) goes to the
converter, which reads it, coerces it or names the path, exactly as before.  A property
test holds the direct path to the converter, both ways.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import attrs

from eps.core.model import Job, LaneKind
from eps.core.outcome import Handle
from eps.core.records import is_record
from eps.core.states import HandleState

if TYPE_CHECKING:
    import cattrs

T = TypeVar("T")
E = TypeVar("E", bound=Enum)


class CodecError(ValueError):
    """A stored document does not fit its record.  One line with the path."""


def _is_namedtuple(cl: object) -> bool:
    """A ``typing.NamedTuple``, or one of the core's (:mod:`eps.core.records`)."""
    from cattrs.cols import is_namedtuple

    return is_namedtuple(cl) or is_record(cl)


@cache
def _converter() -> cattrs.Converter:
    """The strict converter, made on first use (not every command needs it)."""
    import cattrs
    from cattrs.cols import namedtuple_dict_structure_factory, namedtuple_dict_unstructure_factory

    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook_factory(
        _is_namedtuple, lambda cl, c: namedtuple_dict_structure_factory(cl, c, "from_converter", True)
    )
    conv.register_unstructure_hook_factory(_is_namedtuple, namedtuple_dict_unstructure_factory)
    return conv


# --- the direct path: the field types the ledger's two records use --------------------------------


class _Slow(Exception):
    """This value is not exactly what eps writes: the converter reads the document."""


def _exact(kind: type) -> Callable[[object], object]:
    def read(value: object) -> object:
        if type(value) is not kind:
            raise _Slow
        return value

    return read


def _float(value: object) -> float:
    if type(value) is float:
        return value
    if type(value) is int:  # JSON writes 2.0 as 2.0, but a hand-written 2 is a float field's 2.0 too
        return float(value)
    raise _Slow


def _strs(value: object) -> tuple[str, ...]:
    if type(value) is not list or any(type(v) is not str for v in value):
        raise _Slow
    return tuple(value)


def _enum(kind: type[E]) -> Callable[[object], E]:
    def read(value: object) -> E:
        if type(value) is not str:
            raise _Slow
        try:
            return kind(value)
        except ValueError:
            raise _Slow from None

    return read


def _optional(read: Callable[[object], object]) -> Callable[[object], object]:
    return lambda value: None if value is None else read(value)


#: Each annotation the two records use, as written in their modules, and how its JSON reads.
_READERS: dict[str, Callable[[object], object]] = {
    "str": _exact(str),
    "int": _exact(int),
    "bool": _exact(bool),
    "float": _float,
    "str | None": _optional(_exact(str)),
    "int | None": _optional(_exact(int)),
    "tuple[str, ...]": _strs,
    "tuple[str, ...] | None": _optional(_strs),
    "LaneKind": _enum(LaneKind),
    "HandleState": _enum(HandleState),
}


def _written(annotation: object) -> str:
    """An annotation as written: the core's model keeps the types themselves (``int | None``),
    modules with postponed annotations keep the text."""
    if isinstance(annotation, str):
        return annotation
    return annotation.__name__ if type(annotation) is type else str(annotation)


class _Shape(NamedTuple):
    """A record's fields with their readers, and those it cannot do without."""

    fields: tuple[tuple[str, Callable[[object], object]], ...]
    required: frozenset[str]


def _shape(cls: type[Any], required: frozenset[str]) -> _Shape:
    """``cls``'s shape (every annotation must be one :data:`_READERS` knows, or the codec fails
    at import: the tests import it)."""
    return _Shape(tuple((name, _READERS[_written(kind)]) for name, kind in cls.__annotations__.items()), required)


#: The records with a direct path: the two the ledger stores.
_SHAPES: dict[type[Any], _Shape] = {
    Job: _shape(Job, frozenset(n for n in Job._fields if n not in Job._field_defaults)),
    Handle: _shape(Handle, frozenset(a.name for a in attrs.fields(Handle) if a.default is attrs.NOTHING)),
}


def _direct(doc: object, cls: type[T]) -> T:
    """``doc`` as ``cls`` when every key is a field, every required field is there and every
    value has its field's exact type; else :class:`_Slow`."""
    fields, required = _SHAPES[cls]
    if type(doc) is not dict or not required <= doc.keys() or len(doc) > len(fields):
        raise _Slow
    values = {name: read(doc[name]) for name, read in fields if name in doc}
    if len(values) != len(doc):  # a key that is no field
        raise _Slow
    return cls(**values)


# --- the codec --------------------------------------------------------------------------------------


def to_data(obj: object) -> object:
    """A record as plain JSON data (NamedTuples and attrs classes as objects; enums, all
    ``StrEnum``, as they are: JSON writes their values)."""
    shape = _SHAPES.get(type(obj))
    if shape is None:
        return _converter().unstructure(obj)
    # as the converter unstructures: tuples as lists, the rest as it is
    return {name: list(v) if type(v := getattr(obj, name)) is tuple else v for name, _ in shape.fields}


def structure(data: object, cls: type[T]) -> T:
    """Plain JSON data back into its record (strict; :class:`CodecError` names the path)."""
    return _load(json.dumps(data), cls)


_JSON_KINDS = {type(None): "null", bool: "true or false", int: "a number", float: "a number", str: "a string",
               list: "an array"}  # fmt: skip


def _load(text: str, cls: type[T]) -> T:
    import cattrs

    try:
        data = json.loads(text)
        if type(data) is not dict:  # the converter would fail on it with a TypeError of its own
            raise ValueError(f"expected a JSON object, got {_JSON_KINDS.get(type(data), 'something else')}")
        return _converter().structure(data, cls)
    except (ValueError, cattrs.BaseValidationError) as exc:
        msgs = cattrs.transform_error(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
        raise CodecError(f"stored {cls.__name__} does not fit: {msgs[0] if msgs else exc}") from None


def _read(text: str, cls: type[T]) -> T:
    try:
        return _direct(json.loads(text), cls)
    except (_Slow, ValueError):  # not exactly what eps writes, or not JSON: the converter says why
        return _load(text, cls)


def job_to_json(job: Job) -> str:
    return json.dumps(to_data(job), sort_keys=True)


def job_from_json(text: str) -> Job:
    job: Job = _read(text, Job)
    return job


def handle_to_json(handle: Handle) -> str:
    return json.dumps(to_data(handle), sort_keys=True)


def handle_from_json(text: str) -> Handle:
    handle: Handle = _read(text, Handle)
    return handle
