"""``[jobs] supervise = "inline"``: ``eps execute --resume D`` of a ``--count N`` fan-out or a
``--sweep N`` whose walk was SIGKILLed mid-way resumes each copy (as the supervisor does),
never the parent as one more job: one machine per copy, every copy ends, the parent settles."""

from __future__ import annotations

import signal
import uuid
from collections import Counter

import pytest
from faults_support import (
    ZONES,
    Eps,
    GcpTrap,
    RunpodTrap,
    SlurmTrap,
    assert_ledger_consistent,
    assert_no_orphans,
    squeue,
)

CPU = ("cpu-small", "--duration", "30m")


@pytest.mark.parametrize("fan", [("--count", "3"), ("--sweep", "3")], ids=["count", "sweep"])
def test_an_inline_resume_of_a_fanout_resumes_each_copy_once(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, fan: tuple[str, str]
) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    copies = [f"{d}n{i}" for i in (1, 2, 3)]
    child = eps.start("execute", "--json", "--dispatch-id", d, *fan, *CPU, "--", "echo copy-$EPS_TASK_INDEX")
    # Killed as the second insert has been applied (its answer lost): one or two copies hold
    # a machine (or its intent), the rest have not been tried yet.
    gtrap.arm("POST", rf"/zones/{ZONES[0]}/instances$", "after", child, skip=1)
    assert child.wait(30) == -signal.SIGKILL
    assert sorted(eps.dispatch_ids()) == sorted([d, *copies])
    assert eps.attempts(d) == []

    rc, events, err = eps.execute("--resume", d, timeout_s=120)
    assert rc == 0, (events, err)
    rc, out, err = eps.run("wait", d, timeout_s=120)
    assert rc == 0, (out, err)

    assert eps.attempts(d) == []  # the parent is never walked as a job of its own
    rc, out, err = eps.run("reconcile", "--json")  # inline, no supervisor: the next reconcile settles the parent
    assert rc == 0, err
    assert (eps.dispatch(d)["state"], eps.dispatch(d)["message"]) == ("ended", "3/3 copies succeeded")
    made = Counter(name.rsplit("-", 1)[0] for _zone, name in gtrap.materialized)
    assert made == {f"eps-{c}": 1 for c in copies}, gtrap.materialized  # one machine per copy, ever
    for i, c in enumerate(copies):
        row = eps.dispatch(c)
        assert (row["state"], row["exit_code"]) == ("ended", 0), row
        assert [a["state"] for a in eps.attempts(c)].count("intent") == 0
        assert f"copy-{i}" in (eps.state / "logs" / f"{c}.log").read_text()
        assert_ledger_consistent(eps, c)
    assert_no_orphans(eps, gtrap, rtrap)


@pytest.mark.slurm
def test_an_inline_resume_of_a_slurm_sweep_killed_after_its_array_submits_nothing_again(
    seps: Eps, strap: SlurmTrap
) -> None:
    """Killed just after the sweep's one ``sbatch --array`` ran (its job id never read back):
    ``--resume`` finds the array's tasks rather than submit it (or any task) a second time."""
    d = "f" + uuid.uuid4().hex[:10]
    strap.arm("sbatch", "after")
    child = seps.start("execute", "--json", "--dispatch-id", d, "--sweep", "3", "gpu-1", "--duration", "10m",
                       "--", "bash", "-c", 'echo "task $EPS_TASK_INDEX" > "$EPS_OUTPUT_DIR/me"')  # fmt: skip
    assert child.wait(60) == -signal.SIGKILL
    assert len(strap.sbatches()) == 1

    rc, events, err = seps.execute("--resume", d, timeout_s=120)
    assert rc == 0, (events, err)
    rc, out, err = seps.run("wait", d, timeout_s=120)
    assert rc == 0, (out, err)
    assert len(strap.sbatches()) == 1, strap.calls()  # never a second submission
    assert seps.attempts(d) == []
    for i in range(3):
        t = f"{d}n{i + 1}"
        assert (seps.dispatch(t)["state"], seps.dispatch(t)["exit_code"]) == ("ended", 0)
        assert (seps.state / "outputs" / t / "me").read_text() == f"task {i}\n"
    assert squeue(f"eps-{d}") == []
