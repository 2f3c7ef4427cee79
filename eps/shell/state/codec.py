"""One codec for what the ledger stores as JSON (the job, the handle): a strict cattrs
converter, so a row written by this eps reads back as the same record and a row
that does not fit says where (``$.duration_s``)."""

from __future__ import annotations

import json
from typing import Any

import cattrs
from cattrs.cols import is_namedtuple, namedtuple_dict_structure_factory, namedtuple_dict_unstructure_factory

from eps.core.model import Job
from eps.core.outcome import Handle
from eps.core.records import is_record


class CodecError(ValueError):
    """A stored document does not fit its record.  One line with the path."""


def _is_namedtuple(cl: Any) -> bool:
    """A ``typing.NamedTuple``, or one of the core's (:mod:`eps.core.records`)."""
    return is_namedtuple(cl) or is_record(cl)


def _converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook_factory(
        _is_namedtuple, lambda cl, c: namedtuple_dict_structure_factory(cl, c, "from_converter", True)
    )
    conv.register_unstructure_hook_factory(_is_namedtuple, namedtuple_dict_unstructure_factory)
    return conv


_CONV = _converter()


def to_data(obj: Any) -> Any:
    """A record as plain JSON data (NamedTuples and attrs classes as objects, enums as values)."""
    return _CONV.unstructure(obj)


def structure(data: Any, cls: type[Any]) -> Any:
    """Plain JSON data back into its record (strict; :class:`CodecError` names the path)."""
    return _load(json.dumps(data), cls)


def _load(text: str, cls: type[Any]) -> Any:
    try:
        return _CONV.structure(json.loads(text), cls)
    except (ValueError, cattrs.BaseValidationError) as exc:
        msgs = cattrs.transform_error(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
        raise CodecError(f"stored {cls.__name__} does not fit: {msgs[0] if msgs else exc}") from None


def job_to_json(job: Job) -> str:
    return json.dumps(to_data(job), sort_keys=True)


def job_from_json(text: str) -> Job:
    job: Job = _load(text, Job)
    return job


def handle_to_json(handle: Handle) -> str:
    return json.dumps(to_data(handle), sort_keys=True)


def handle_from_json(text: str) -> Handle:
    handle: Handle = _load(text, Handle)
    return handle
