"""The CreatePodRequest bodies eps builds, checked against the API document's own schema."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runpod_testkit import cpu_rung, gpu_rung, schema_validator

from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.core.names import pod_name, pod_prefix
from eps.core.outcome import FailureKind, LaneFailure
from eps.shell.lanes.runpod.wire import RunpodSettings, pod_request

HERE = Path(__file__).parent
SHARED = HERE.parents[3] / "shared" / "reference" / "runpod-openapi-v2.json"
VENDORED_SHA256 = "b8bce61c5a2290d28a7cb2ed53173637166817249986cb18b101b2fd651fd313"
CREATE = schema_validator("CreatePodRequest")
SETTINGS = RunpodSettings()
# flavor -> container disk GB per vCPU (gen 3: 10, cpu5c: 15)
DISK_PER_VCPU = {"cpu3c": 10, "cpu3g": 10, "cpu3m": 10, "cpu5c": 15, "cpu5g": 10, "cpu5m": 10}
RAM_PER_VCPU = {"cpu3c": 2, "cpu3g": 4, "cpu3m": 8, "cpu5c": 2, "cpu5g": 4, "cpu5m": 8}


def errors(body: object) -> list[str]:
    return [e.message for e in CREATE.iter_errors(body)]


def test_the_vendored_document_is_the_reference_one() -> None:
    """The copy under tests/ is the one the suite trusts, whether or not ../shared is here:
    its digest is pinned, and when the shared reference is beside the repository it is
    compared too (a newer reference means: vendor it, re-pin, rerun the contract run)."""
    vendored = (HERE / "runpod-openapi-v2.json").read_bytes()
    assert hashlib.sha256(vendored).hexdigest() == VENDORED_SHA256
    if SHARED.exists():
        assert json.loads(vendored) == json.loads(SHARED.read_text())


def test_the_schema_check_has_teeth() -> None:
    good = {"name": "x", "image": "ubuntu:24.04", "cpu": {"id": "cpu3g", "vcpuCount": 4}}
    assert errors(good) == []
    assert errors({**good, "bogus": 1})  # unevaluatedProperties: false
    assert errors({**good, "cpu": {"id": "cpu3g", "vcpuCount": 4, "memory": 16}})  # memory is derived
    assert errors({**good, "cpu": {"id": "cpu3g", "vcpuCount": 1}})  # minimum 2
    assert errors({"name": "x", "cpu": {"id": "cpu3g", "vcpuCount": 4}})  # image required without template
    assert errors({**good, "disk": 0})


def test_cpu_body_names_flavor_and_vcpus_exactly() -> None:
    job = Job("cpu-small", 600, command=("python", "-m", "analysis", "--in", "a b.csv"))
    body = pod_request(cpu_rung("cpu3g-4-16", disk_gb=40), "eps-d1-1", SETTINGS, job=job, dispatch_id="d1")
    assert not isinstance(body, LaneFailure)
    assert errors(body) == []
    assert body["cpu"] == {"id": "cpu3g", "vcpuCount": 4}
    assert body["disk"] == 40
    assert body["name"] == "eps-d1-1"
    assert "args" not in body  # the image starts as built (its sshd); eps launches the job over ssh
    assert body["env"] == {"EPS_POD_NAME": "eps-d1-1", "EPS_DISPATCH_ID": "d1"}
    assert "gpu" not in body


def test_multi_gpu_job_is_one_pod_with_every_gpu() -> None:
    body = pod_request(gpu_rung("NVIDIA H200", 4), "eps-g-1", SETTINGS)
    assert not isinstance(body, LaneFailure)
    assert errors(body) == []
    assert body["gpu"] == {"id": "NVIDIA H200", "count": 4, "allowedCudaVersions": ["12.8", "12.9", "13.0"]}
    assert "cpu" not in body


def test_data_centers_come_from_settings() -> None:
    body = pod_request(cpu_rung(), "eps-d-1", RunpodSettings(data_center_ids=("EU-RO-1", "US-KS-2")))
    assert not isinstance(body, LaneFailure)
    assert body["dataCenterIds"] == ["EU-RO-1", "US-KS-2"]
    assert errors(body) == []


@pytest.mark.parametrize(
    ("instance", "disk", "fits"),
    [
        ("cpu3g-4-16", 40, True),  # 4 x 10
        ("cpu3g-4-16", 41, False),
        ("cpu5c-4-8", 60, True),  # 4 x 15
        ("cpu5c-4-8", 61, False),
        ("cpu3c-2-4", 20, True),
        ("cpu3m-32-256", 320, True),
    ],
)
def test_container_disk_stays_within_the_flavor_limit(instance: str, disk: int, fits: bool) -> None:
    body = pod_request(cpu_rung(instance, disk_gb=disk), "eps-d-1", SETTINGS)
    if fits:
        assert not isinstance(body, LaneFailure)
        assert body["disk"] == disk
    else:
        assert isinstance(body, LaneFailure)
        assert body.kind is FailureKind.INVALID_REQUEST
        assert "limit" in body.message


@pytest.mark.parametrize(
    "rung",
    [
        cpu_rung("cpu3g-3-12"),  # not a power of two
        cpu_rung("cpu3g-64-256"),  # not offered
        cpu_rung("cpu9x-4-16"),  # unknown flavor
        Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "not ours", machine="e2-standard-4"),
    ],
)
def test_eps_never_sends_a_body_it_knows_is_wrong(rung: Rung) -> None:
    failure = pod_request(rung, "eps-d-1", SETTINGS)
    assert isinstance(failure, LaneFailure)
    assert failure.kind is FailureKind.INVALID_REQUEST


def test_names_carry_the_dispatch_id() -> None:
    assert pod_name("7f3a", 2) == "eps-7f3a-2"
    assert pod_name("7f3a", 2).startswith(pod_prefix("7f3a"))
    assert not pod_name("7f3a1", 1).startswith(pod_prefix("7f3a"))


@given(
    flavor=st.sampled_from(sorted(DISK_PER_VCPU)),
    vcpus=st.sampled_from([2, 4, 8, 16, 32]),
    disk=st.none() | st.integers(min_value=1, max_value=480),
    command=st.lists(st.text(min_size=1, max_size=12), max_size=4),
    dispatch=st.text(alphabet="0123456789abcdef", min_size=1, max_size=16),
)
def test_every_cpu_rung_within_limits_gives_a_schema_valid_body(
    flavor: str, vcpus: int, disk: int | None, command: list[str], dispatch: str
) -> None:
    instance = f"{flavor}-{vcpus}-{vcpus * RAM_PER_VCPU[flavor]}"
    job = Job("cpu-small", 600, command=tuple(command))
    body = pod_request(cpu_rung(instance, disk_gb=disk), pod_name(dispatch, 1), SETTINGS, job=job, dispatch_id=dispatch)
    if disk is not None and disk > vcpus * DISK_PER_VCPU[flavor]:
        assert isinstance(body, LaneFailure)
        return
    assert not isinstance(body, LaneFailure)
    assert errors(body) == []
    assert body["cpu"] == {"id": flavor, "vcpuCount": vcpus}
