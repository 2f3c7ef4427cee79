"""The [gcp] config section (issue 13 item 4, issue 12): every key a real project needs,
strictly parsed, one line naming the key when it is wrong."""

from __future__ import annotations

import pytest

from eps.core.tables import DEFAULT_POLICY
from eps.shell.config.convert import settings_from_config
from eps.shell.config.settings import ConfigError, GcpSettings, Settings

BASE = Settings(policy=DEFAULT_POLICY)


def gcp(**section: object) -> GcpSettings:
    return settings_from_config({"gcp": section}, BASE, "config.toml").gcp


def test_every_key_is_read() -> None:
    got = gcp(
        project="p",
        image="projects/debian-cloud/global/images/family/debian-12",
        gpu_image="projects/p/global/images/family/cuda",
        network="global/networks/research",
        subnetwork="regions/us-central1/subnetworks/research",
        external_ip=False,
        disk_type="pd-ssd",
        service_account="default",
        scopes=["cloud-platform", "https://www.googleapis.com/auth/devstorage.read_only"],
        tags=["eps-job"],
        flex_start_wait_s=1800,
    )
    assert got.gpu_image == "projects/p/global/images/family/cuda"
    assert (got.network, got.subnetwork, got.external_ip, got.disk_type) == (
        "global/networks/research", "regions/us-central1/subnetworks/research", False, "pd-ssd",
    )  # fmt: skip
    assert got.service_account == "default"
    assert got.scopes == (
        "https://www.googleapis.com/auth/cloud-platform",
        "https://www.googleapis.com/auth/devstorage.read_only",
    )
    assert got.tags == ("eps-job",)
    assert got.flex_start_wait_s == 1800


def test_the_defaults_work_in_a_default_project() -> None:
    got = gcp(project="p")
    assert got.network == "global/networks/default" and got.subnetwork is None
    assert got.external_ip is True and got.disk_type == "pd-balanced"
    assert got.service_account is None and got.tags == () and got.gpu_image is None
    assert got.flex_start_wait_s == 600


@pytest.mark.parametrize(
    ("section", "where"),
    [
        ({"tags": ["Bad_Tag"]}, "$.gcp.tags[0]"),
        ({"tags": ["-x"]}, "$.gcp.tags[0]"),
        ({"external_ip": "yes"}, "$.gcp.external_ip"),
        ({"flex_start_wait_s": 30}, "$.gcp.flex_start_wait_s"),
        ({"flex_start_wait_s": 9000}, "$.gcp.flex_start_wait_s"),
        ({"network": "my network"}, "$.gcp.network"),
        ({"scopes": []}, "$.gcp.scopes"),
        ({"disk_type": " "}, "$.gcp.disk_type"),
        ({"ssh_user": "Root; rm"}, "$.gcp.ssh_user"),
        ({"ssh_user": ""}, "$.gcp.ssh_user"),
        ({"work_root": "a\nb"}, "$.gcp.work_root"),
        ({"work_root": "-rf"}, "$.gcp.work_root"),
    ],
)
def test_a_wrong_value_is_one_line_naming_the_key(section: dict[str, object], where: str) -> None:
    with pytest.raises(ConfigError) as caught:
        gcp(**section)
    assert where in str(caught.value)
    assert "\n" not in str(caught.value)
