"""The ledger codec's direct path (:mod:`eps.shell.state.codec`) is held to the strict cattrs
converter it stands in for: every document reads to the same record, or fails with the same
one-line message, and every record is written as the converter writes it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eps.core.model import Job, LaneKind
from eps.core.outcome import Handle
from eps.core.states import HandleState
from eps.shell.state import codec

#: The reference: the converter's path, which reads every document as the codec did before the
#: direct path (a document that is not a JSON object is one line now; it was a TypeError).
_reference_read = codec._load
CONV = codec._converter()


def _outcome(read: Any, text: str, cls: type[Any]) -> tuple[str, Any]:
    try:
        record = read(text, cls) if cls is not None else read(text)
    except codec.CodecError as exc:
        return ("error", str(exc))
    # the same record, field by field, with the same types (True is not 1, 2.0 is not 2)
    values = record._asdict() if isinstance(record, tuple) else {k: getattr(record, k) for k in Handle.__annotations__}
    return ("ok", {k: (type(v).__name__, v) for k, v in values.items()})


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**12), st.floats(allow_nan=False), st.text(max_size=6),
    st.sampled_from(["slurm", "gcp", "runpod", "vm", "running", "pending", "0", "1.5", "true"]),
)  # fmt: skip
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.lists(st.text(max_size=4), max_size=3),
                   st.dictionaries(st.text(max_size=3), scalars, max_size=2))  # fmt: skip


def documents(fields: tuple[str, ...]) -> st.SearchStrategy[Any]:
    keys = st.sampled_from([*fields, "extra", "Intent"])
    return st.one_of(st.dictionaries(keys, values, max_size=len(fields) + 1), values)


jobs = st.builds(
    Job,
    intent=st.text(max_size=8),
    duration_s=st.none() | st.integers(0, 10**9),
    restartable=st.booleans(),
    footprint_gb=st.floats(0, 1e6),
    gradient_fit=st.booleans(),
    count=st.integers(1, 1000),
    pin=st.none() | st.text(max_size=6),
    command=st.lists(st.text(max_size=6), max_size=3).map(tuple),
    workdir=st.none() | st.text(max_size=6),
    setup=st.none() | st.text(max_size=6),
    env_names=st.lists(st.text(max_size=4), max_size=2).map(tuple),
    time_limit_s=st.none() | st.integers(0, 10**7),
    task_index=st.integers(0, 100),
    task_count=st.integers(1, 100),
    retry=st.none() | st.lists(st.sampled_from(["error", "interruption"]), max_size=2).map(tuple),
    retry_for_s=st.none() | st.integers(0, 10**6),
    max_restarts=st.none() | st.integers(0, 100),
    sync_every_s=st.none() | st.integers(0, 10**5),
    restart=st.integers(0, 100),
)
handles = st.builds(
    Handle,
    lane=st.text(max_size=6), kind=st.sampled_from(LaneKind), id=st.text(max_size=6), rung=st.text(max_size=12),
    zone=st.none() | st.text(max_size=6), qos=st.none() | st.text(max_size=6),
    machine=st.none() | st.text(max_size=6), state=st.sampled_from(HandleState), reason=st.none() | st.text(max_size=6),
)  # fmt: skip


@st.composite
def near(draw: Any, records: st.SearchStrategy[Any]) -> dict[str, Any]:
    """What eps writes for a record, with one field given another value, or dropped, or one
    key more: the documents at the direct path's edge."""
    data: dict[str, Any] = json.loads(json.dumps(codec.to_data(draw(records))))
    key = draw(st.sampled_from(sorted(data)))
    match draw(st.sampled_from(["value", "drop", "extra", "as written"])):
        case "value":
            return {**data, key: draw(values)}
        case "drop":
            return {k: v for k, v in data.items() if k != key}
        case "extra":
            return {**data, "extra": draw(values)}
    return data


@settings(max_examples=600)
@given(st.one_of(documents(Job._fields), near(jobs)))
def test_a_stored_job_reads_as_the_converter_reads_it(doc: Any) -> None:
    text = json.dumps(doc)
    assert _outcome(codec.job_from_json, text, None) == _outcome(_reference_read, text, Job)


@settings(max_examples=600)
@given(st.one_of(documents(tuple(Handle.__annotations__)), near(handles)))
def test_a_stored_handle_reads_as_the_converter_reads_it(doc: Any) -> None:
    text = json.dumps(doc)
    assert _outcome(codec.handle_from_json, text, None) == _outcome(_reference_read, text, Handle)


@pytest.mark.parametrize(
    ("records", "write", "read"),
    [(jobs, codec.job_to_json, codec.job_from_json), (handles, codec.handle_to_json, codec.handle_from_json)],
    ids=["job", "handle"],
)
@settings(max_examples=300)
@given(data=st.data())
def test_a_record_is_written_as_the_converter_writes_it_and_reads_back_the_same(
    records: st.SearchStrategy[Any], write: Any, read: Any, data: st.DataObject
) -> None:
    record = data.draw(records)
    assert codec.to_data(record) == CONV.unstructure(record)
    text = write(record)
    assert text == json.dumps(CONV.unstructure(record), sort_keys=True)
    assert read(text) == record
    assert _outcome(read, text, None) == _outcome(_reference_read, text, type(record))


def test_what_eps_writes_takes_the_direct_path() -> None:
    """The documents eps writes never need the converter (else every status would pay for it)."""
    job = Job("gpu-1", 3600, restartable=True, footprint_gb=2, command=("python", "t.py"), retry=("error",))
    handle = Handle("gcp", LaneKind.GCP, "eps-x", "gcp/n1/us-central1-a/spot", zone="us-central1-a")
    assert codec._direct(json.loads(codec.job_to_json(job)), Job) == job
    assert codec._direct(json.loads(codec.handle_to_json(handle)), Handle) == handle


def test_a_document_that_does_not_fit_names_the_path() -> None:
    for text, says in (
        ('{"intent": "cpu-small", "duration_s": "soon"}', "$.duration_s"),
        ('{"duration_s": 60}', "$.intent"),
        ('{"intent": "cpu-small", "colour": "red"}', "colour"),
        ("{not json", "does not fit"),
        ("null", "expected a JSON object, got null"),
        ('["cpu-small"]', "expected a JSON object, got an array"),
    ):
        try:
            codec.job_from_json(text)
        except codec.CodecError as exc:
            assert says in str(exc), (text, str(exc))
            assert "\n" not in str(exc)
        else:
            raise AssertionError(f"{text} was read")
