"""The shared VM lane's room (P2): does a trivial op fit the VM now?

A trivial op (at most ``trivial_op_s`` and ``big_footprint_gb``) stays on the
shared VM only when it fits there: the memory of its intent, once per copy
(``--count N`` copies run side by side on the VM), within the VM's memory, and
its footprint, once per copy, plus ``vm_disk_margin_gb`` within the VM's free
disk.  Otherwise it takes the normal CPU route (GCP, then RunPod) and the plan
says why (skip code ``vm_too_small``).  An unknown size never keeps an op off
the VM.

Measuring the VM belongs to the shell (``eps execute``); :func:`measured_vm`
is the one place its raw numbers become a :class:`VmCapacity`, so the shell
only reads the machine and puts the record in the capacity snapshot's ``vm``.
"""

from __future__ import annotations

from eps.core.model import Intent, Job, VmCapacity

#: Bytes per GB in the VM's capacity (the machine tables' GB are 2**30 bytes too).
GB = 2**30


def measured_vm(vcpus: int | None, mem_available_bytes: int | None, disk_free_bytes: int | None) -> VmCapacity:
    """The VM's capacity from what the shell measures, ``None`` where it could not.

    What to measure (the shell's part): ``vcpus`` = ``os.cpu_count()``;
    ``mem_available_bytes`` = ``MemAvailable`` of ``/proc/meminfo`` (kB x 1024):
    what a new process can get now, not the machine's total;
    ``disk_free_bytes`` = ``shutil.disk_usage(path).free`` of the file system a
    VM job writes to (the state directory's).  Put the result in
    ``CapacitySnapshot.vm`` before calling ``plan()``."""
    return VmCapacity(
        vcpus=vcpus,
        mem_gb=None if mem_available_bytes is None else round(mem_available_bytes / GB, 2),
        free_disk_gb=None if disk_free_bytes is None else round(disk_free_bytes / GB, 2),
    )


def vm_room(snapshot: VmCapacity, default: VmCapacity) -> VmCapacity:
    """The VM's capacity for this plan: the snapshot's, field by field, else the policy's default."""
    return VmCapacity(
        vcpus=default.vcpus if snapshot.vcpus is None else snapshot.vcpus,
        mem_gb=default.mem_gb if snapshot.mem_gb is None else snapshot.mem_gb,
        free_disk_gb=default.free_disk_gb if snapshot.free_disk_gb is None else snapshot.free_disk_gb,
    )


def vm_misfit(job: Job, intent: Intent, room: VmCapacity, margin_gb: int) -> str | None:
    """Why ``job`` does not fit the VM (one line), or ``None`` when it fits or the size is unknown."""
    copies = job.count
    each = f" ({copies} copies side by side)" if copies > 1 else ""
    mem = intent.mem_gb * copies
    if room.mem_gb is not None and mem > room.mem_gb:
        return f"P2: {intent.name} needs {mem:g} GB of memory{each}; the shared VM has {room.mem_gb:g} GB"
    disk = job.footprint_gb * copies
    if room.free_disk_gb is not None and disk + margin_gb > room.free_disk_gb:
        return (
            f"P2: footprint {disk:g} GB{each} + {margin_gb} GB margin > {room.free_disk_gb:g} GB free disk "
            f"on the shared VM"
        )
    return None
