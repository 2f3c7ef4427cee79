"""Names, labels and request ids hold GCE's rules for any dispatch id (property tests)."""

from __future__ import annotations

import re
import uuid

from hypothesis import given
from hypothesis import strategies as st

from eps.core.model import LaneKind, Provisioning, Rung
from eps.shell.lanes.gcp.wire import insert_request_id, instance_name, label_value

GCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
RUNG = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "test", machine="e2-standard-2", zone="us-central1-a")


@given(st.text(max_size=200))
def test_label_value_is_always_valid(text):
    assert LABEL_VALUE.fullmatch(label_value(text))


@given(st.text(max_size=200), st.text(max_size=200))
def test_distinct_ids_keep_distinct_labels(a, b):
    if a != b:
        assert label_value(a) != label_value(b)


@given(st.text(max_size=200), st.integers(min_value=0, max_value=64))
def test_instance_name_is_a_valid_gce_name(dispatch, copy):
    assert GCE_NAME.fullmatch(instance_name(dispatch, RUNG, copy))


@given(st.text(max_size=100), st.integers(min_value=0, max_value=10**6))
def test_request_id_is_a_nonzero_uuid(dispatch, attempt):
    value = uuid.UUID(insert_request_id(dispatch, RUNG, attempt))
    assert value.int != 0
    assert value.version == 5
    assert insert_request_id(dispatch, RUNG, attempt) == str(value)
