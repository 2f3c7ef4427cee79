"""List prices of what a dispatch ran on, for ``eps status``'s cost column.

Information only (P12): nothing in eps reads these numbers to refuse, stop or limit
work; they are the tables' list prices times the runtime, not a bill.  Pure.
"""

from __future__ import annotations

from eps.core.model import GcpMachine, LaneKind, Policy, Provisioning


def list_price_per_hour(
    policy: Policy, kind: LaneKind, machine: str | None, provisioning: Provisioning | None, gpus: int = 0
) -> float | None:
    """The list price per hour of one machine of this kind, or ``None`` when the tables
    do not know it.  The shared VM and SLURM clusters are free."""
    if kind in (LaneKind.VM, LaneKind.SLURM):
        return 0.0
    if machine is None:
        return None
    if kind is LaneKind.GCP:
        m = policy.gcp_machine(machine)
        if m is None:
            return None
        return gcp_price(m, provisioning)
    flavor, _, rest = machine.partition("-")  # a RunPod CPU instance id: cpu3g-4-16
    for f in policy.runpod_cpu:
        if f.name == flavor and rest.split("-", 1)[0].isdigit():
            return round(int(rest.split("-", 1)[0]) * f.per_vcpu_hour, 4)
    for g in policy.runpod_gpu:
        if g.id == machine:
            return round(max(1, gpus) * g.per_gpu_hour, 4)
    return None


def gcp_price(machine: GcpMachine, provisioning: Provisioning | None) -> float:
    """The list price per hour of ``machine`` under ``provisioning`` (on-demand when unknown)."""
    if provisioning is Provisioning.SPOT:
        return machine.spot_per_hour
    if provisioning is Provisioning.FLEX_START:
        return machine.flex_start_per_hour or machine.on_demand_per_hour
    return machine.on_demand_per_hour


def list_cost(per_hour: float | None, runtime_s: float | None) -> float | None:
    """The list price of ``runtime_s`` at ``per_hour``, rounded to cents (information only, P12)."""
    if per_hour is None or runtime_s is None:
        return None
    return round(per_hour * runtime_s / 3600, 2)
