"""eps.shell.util.jsontext.dumps is json.dumps(obj, indent=2), byte for byte, and json's errors."""

from __future__ import annotations

import json
from enum import IntEnum, StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eps.core.model import Job, Provisioning
from eps.shell.util.jsontext import dumps


class Word(StrEnum):
    A = "a"
    QUOTE = 'say "hi"\n'


class Num(IntEnum):
    ONE = 1


scalars = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.sampled_from(list(Word))
    | st.sampled_from(list(Num))
)  # fmt: skip
keys = st.text() | st.integers() | st.floats() | st.booleans() | st.none() | st.sampled_from(list(Word))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(keys, inner, max_size=4),
    max_leaves=30,
)  # fmt: skip


@settings(max_examples=400)
@given(values)
def test_dumps_is_json_dumps_with_indent_2(value: Any) -> None:
    assert dumps(value) == json.dumps(value, indent=2)


def test_the_documents_eps_writes() -> None:
    odd = "\u00e9\U0001f600\x7f\x00\ud800"
    doc = {"job": Job("gpu-1", 3600)._asdict(), "how": Provisioning.SPOT, "s": odd, "e": {}, "t": ()}
    assert dumps(doc) == json.dumps(doc, indent=2)
    assert dumps([]) == "[]" and dumps({}) == "{}" and dumps(float("nan")) == "NaN"


def test_what_json_refuses_it_refuses_alike() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    for bad in ({"x": object()}, {(1, 2): 3}, cycle, {"a": {1, 2}}):
        with pytest.raises((TypeError, ValueError)) as ours:
            dumps(bad)
        with pytest.raises((TypeError, ValueError)) as theirs:
            json.dumps(bad, indent=2)
        assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))
