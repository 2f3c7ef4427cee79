"""The shared VM's room (P2, issue 14.5): the measured record, the merge with the policy's default, the fit."""

from __future__ import annotations

import pytest

from eps.core.model import GB, Job, VmCapacity
from eps.core.router import _vm_misfit as vm_misfit
from eps.core.tables import DEFAULT_POLICY

SMALL = DEFAULT_POLICY.intent("cpu-small")
BIGMEM = DEFAULT_POLICY.intent("cpu-bigmem")
assert SMALL is not None and BIGMEM is not None


def test_p2_measured_vm_turns_raw_numbers_into_gb() -> None:
    vm = VmCapacity.measured(4, 15 * GB + GB // 2, 120 * GB)
    assert vm == VmCapacity(vcpus=4, mem_gb=15.5, free_disk_gb=120.0)
    assert VmCapacity.measured(None, None, None) == VmCapacity()


def test_p2_the_snapshot_wins_field_by_field() -> None:
    default = VmCapacity(vcpus=2, mem_gb=8, free_disk_gb=50)
    assert VmCapacity(mem_gb=64).over(default) == VmCapacity(vcpus=2, mem_gb=64, free_disk_gb=50)
    assert VmCapacity().over(VmCapacity()) == VmCapacity()


def test_p2_unknown_sizes_fit() -> None:
    assert vm_misfit(Job("cpu-bigmem", 30, footprint_gb=40, count=8), BIGMEM, VmCapacity(), 10) is None


def test_p2_memory_and_disk_with_margin() -> None:
    vm = VmCapacity(vcpus=2, mem_gb=16, free_disk_gb=30)
    assert vm_misfit(Job("cpu-small", 30, footprint_gb=20), SMALL, vm, 10) is None  # 20 + 10 <= 30
    why = vm_misfit(Job("cpu-small", 30, footprint_gb=21), SMALL, vm, 10)
    assert why is not None and "21 GB + 10 GB margin > 30 GB free disk" in why
    why = vm_misfit(Job("cpu-bigmem", 30), BIGMEM, vm, 10)
    assert why is not None and "128 GB of memory" in why and "16 GB" in why
    why = vm_misfit(Job("cpu-small", 30, count=2), SMALL, vm, 10)
    assert why is not None and "32 GB" in why and "2 copies side by side" in why
    assert "\n" not in why


def test_p2_a_copy_of_a_fan_out_fits_only_where_all_copies_fit() -> None:
    """The executor walks each copy of --count N alone (count 1, task i of N); the copy must
    not land on the VM where the plan of all N said they do not fit together."""
    vm = VmCapacity(vcpus=2, mem_gb=16, free_disk_gb=100)
    assert vm_misfit(Job("cpu-small", 30, count=1), SMALL, vm, 10) is None
    why = vm_misfit(Job("cpu-small", 30, count=1, task_index=1, task_count=2), SMALL, vm, 10)
    assert why is not None and "2 copies side by side" in why


@pytest.mark.parametrize(
    ("job", "side_by_side"),
    [
        (Job("cpu-small", 30, sweep=5), 5),  # every task at once
        (Job("cpu-small", 30, sweep=5, sweep_parallel=2), 2),  # at most K at once: min(N, K)
        (Job("cpu-small", 30, sweep=5, sweep_parallel=5), 5),
        (Job("cpu-small", 30, sweep_parallel=2, task_index=4, task_count=5), 2),  # a task keeps its sweep's K
        (Job("cpu-small", 30, task_index=4, task_count=5), 5),  # a task of a sweep of all at once
        (Job("cpu-small", 30, task_index=1, task_count=2), 2),  # a copy of a --count 2
        (Job("cpu-small", 30, count=3), 3),
        (Job("cpu-small", 30), 1),
    ],
)
def test_p2_the_fit_counts_the_copies_that_run_side_by_side(job: Job, side_by_side: int) -> None:
    """A VM with room for 4 cpu-small side by side (16 GB each): a sweep of 5 fits when at
    most 4 of its tasks run at once (``--sweep-parallel``), each of its tasks as well."""
    vm = VmCapacity(vcpus=8, mem_gb=64, free_disk_gb=1000)
    why = vm_misfit(job, SMALL, vm, 10)
    if side_by_side <= 4:
        assert why is None, why
    else:
        assert why is not None and f"{side_by_side} copies side by side" in why, why
    one = VmCapacity(vcpus=8, mem_gb=16 * side_by_side, free_disk_gb=1000)  # just room for them
    assert vm_misfit(job, SMALL, one, 10) is None
    if side_by_side > 1:
        less = VmCapacity(vcpus=8, mem_gb=16 * side_by_side - 1, free_disk_gb=1000)
        assert vm_misfit(job, SMALL, less, 10) is not None


def test_p10_a_pin_to_the_vm_is_its_rung_and_never_a_skip_as_well() -> None:
    """A job pinned to the VM that P2 would not keep there (too long, or too big for it) runs
    there (P10): the plan's one rung is the VM, a note says what the pin overrode, and the VM is
    not also listed among the skips."""
    from eps.core.model import CapacitySnapshot
    from eps.core.router import plan
    from eps.core.tables import DEFAULT_GRANTS

    small_vm = CapacitySnapshot(vm=VmCapacity(vcpus=1, mem_gb=2, free_disk_gb=20))
    for job, snap, why in [
        (Job("cpu-small", 7200, pin="vm"), CapacitySnapshot(), "not a trivial op"),
        (Job("cpu-small", 30, pin="vm"), small_vm, "does not fit"),
    ]:
        route = plan(job, snap, DEFAULT_GRANTS, None, policy=DEFAULT_POLICY)
        assert [r.lane for r in route.rungs] == ["vm"]
        assert "vm" not in {s.lane for s in route.skipped}
        assert any(n.startswith("P10: pinned to the VM, although") and why in n for n in route.notes), route.notes
