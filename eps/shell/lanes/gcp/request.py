"""The ``Instance`` an insert sends: scheduling per provisioning model (spot, on-demand,
flex-start), the boot image per machine family, the network, disks, metadata (the startup
script, eps's own keys, ``ssh-keys``), labels and service account.  Pure: it builds the
request, it never calls Compute."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import frozen

from eps.core.model import Job, Provisioning, Rung
from eps.core.tables import flex_start_run_s, gcp_image
from eps.shell.lanes.gcp.wire import (
    LABEL_ATTEMPT,
    LABEL_COPY,
    LABEL_DISPATCH,
    LABEL_PROVISIONING,
    LABEL_RUNG,
    META_DISPATCH,
    META_LANE,
    META_RUNG,
    compute,
    is_gpu_machine,
    label_value,
    startup_script,
)

if TYPE_CHECKING:
    from google.cloud import compute_v1


@frozen
class InstanceShape:
    """What the ``[gcp]`` settings fix about every instance eps makes."""

    image: str
    gpu_image: str | None
    network: str
    subnetwork: str | None
    external_ip: bool
    service_account: str | None
    scopes: tuple[str, ...]
    tags: tuple[str, ...]
    boot_disk_gb: int
    disk_type: str
    spot_action: str
    capacity_wait_s: float
    work_root: str  # where dispatch roots go on the VM (relative: under the ssh user's home)
    linger_s: int  # how long the VM's watcher keeps it after the job ended


def build_instance(
    job: Job,
    rung: Rung,
    dispatch_id: str,
    attempt: int,
    name: str,
    copy: int,
    ssh_keys: str | None,
    shape: InstanceShape,
    *,
    ssh_user: str = "eps",
) -> compute_v1.Instance:
    """The ``Instance`` an insert for ``rung`` sends."""
    compute_v1 = compute()
    zone = rung.zone or ""
    gpu = is_gpu_machine(rung)
    # Every scheduling field on one object: a second Scheduling would replace the first.
    if rung.provisioning is Provisioning.SPOT:
        scheduling = compute_v1.Scheduling(
            provisioning_model="SPOT",
            instance_termination_action=shape.spot_action,
            on_host_maintenance="TERMINATE",
            automatic_restart=False,
        )
    elif rung.provisioning is Provisioning.FLEX_START:
        # GCE "Create a Flex-start VM": FLEX_START, a max run duration (10 min..7 d),
        # a termination action, TERMINATE on host maintenance, no reservation.  DELETE:
        # nothing of a finished run keeps billing.
        scheduling = compute_v1.Scheduling(
            provisioning_model="FLEX_START",
            max_run_duration=compute_v1.Duration(seconds=flex_start_run_s(job.duration_s)),
            instance_termination_action="DELETE",
            on_host_maintenance="TERMINATE",
            automatic_restart=False,
        )
    else:
        scheduling = compute_v1.Scheduling(
            provisioning_model="STANDARD",
            on_host_maintenance="TERMINATE" if gpu else "MIGRATE",
            automatic_restart=True,
        )
    boot = compute_v1.AttachedDisk(
        boot=True,
        auto_delete=True,
        initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image=gcp_image(rung.machine or "", cpu_image=shape.image, gpu_image=shape.gpu_image),
            disk_size_gb=rung.disk_gb or shape.boot_disk_gb,
            disk_type=f"zones/{zone}/diskTypes/{shape.disk_type}",
        ),
    )
    nic = compute_v1.NetworkInterface(network=shape.network)
    if shape.subnetwork is not None:
        nic.subnetwork = shape.subnetwork
    if shape.external_ip:
        nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    metadata = {
        "startup-script": startup_script(
            job, dispatch_id, rung, user=ssh_user, work_root=shape.work_root, linger_s=shape.linger_s
        ),
        "enable-guest-attributes": "TRUE",
        META_DISPATCH: dispatch_id,
        META_RUNG: rung.key,
        META_LANE: rung.lane,
    }
    if ssh_keys is not None:
        metadata["ssh-keys"] = ssh_keys
    instance = compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/{rung.machine}",
        scheduling=scheduling,
        disks=[boot],
        network_interfaces=[nic],
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in metadata.items()]),
        labels={
            LABEL_DISPATCH: label_value(dispatch_id),
            LABEL_RUNG: label_value(rung.key.replace("/", "_")),
            LABEL_ATTEMPT: str(attempt),
            LABEL_COPY: str(copy),
            LABEL_PROVISIONING: rung.provisioning.value,
        },
    )
    if rung.provisioning is Provisioning.FLEX_START:
        instance.reservation_affinity = compute_v1.ReservationAffinity(consume_reservation_type="NO_RESERVATION")
        # How long the request may wait for capacity (the VM PENDING): 0 = only what is free now.
        instance.params = compute_v1.InstanceParams(
            request_valid_for_duration=compute_v1.Duration(seconds=int(shape.capacity_wait_s))
        )
    if shape.tags:
        instance.tags = compute_v1.Tags(items=list(shape.tags))
    if shape.service_account is not None:
        instance.service_accounts = [compute_v1.ServiceAccount(email=shape.service_account, scopes=list(shape.scopes))]
    return instance  # type: ignore[no-any-return]
