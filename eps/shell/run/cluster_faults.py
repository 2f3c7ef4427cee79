"""What the free clusters said is set up wrong, remembered on this host: a tier whose
partition, account or QoS the cluster refused (``sbatch``: ``Invalid partition name
specified``), so that ``eps plan`` marks the rung and ``eps execute`` stops there instead
of falling to a paid lane (:class:`eps.core.model.TierFault`).

Written by ``eps check`` (its ``sbatch --test-only`` of each tier: a refused tier is
recorded, a tier that passes is cleared) and by a walk whose ``sbatch`` was refused for a
setting.  A remembered fault applies only while the config still renders the tier as it did
when the cluster refused it (:func:`setting`): a fixed config clears it by itself.

One small tab-separated file, ``cluster-faults.tsv`` in the state directory, read by every
``eps plan`` without ``json`` (kept off the plan path), written whole through a rename.
"""

from __future__ import annotations

import os

from eps.core.model import CapacitySnapshot, ClusterConfig, Policy, TierFault, evolve

FILE = "cluster-faults.tsv"


def setting(cluster: ClusterConfig, qos: str | None) -> str:
    """How the config renders ``qos`` on ``cluster`` now: what a fault was found against."""
    return f"partition={cluster.partition_for(qos) or '-'} account={cluster.account_for(qos) or '-'} qos={qos or '-'}"


def _clean(text: str) -> str:
    return " ".join(text.replace("\t", " ").split())


def read(state_dir: str) -> list[TierFault]:
    """Every remembered fault (whatever the config says now); none when there is no file or
    it cannot be read (a plan is advice; a bad line is skipped)."""
    try:
        with open(os.path.join(state_dir, FILE), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split("\t")
        if len(parts) == 5:
            cluster, qos, reason, fix, how = parts
            found.append(TierFault(cluster, qos or None, reason, fix, how))
    return found


def _write(state_dir: str, faults: list[TierFault]) -> None:
    os.makedirs(state_dir, exist_ok=True)
    path = os.path.join(state_dir, FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for t in faults:
            f.write("\t".join((t.cluster, t.qos or "", _clean(t.reason), _clean(t.fix), t.setting)) + "\n")
    os.replace(tmp, path)


def record(state_dir: str, policy: Policy, fault: TierFault) -> None:
    """Remember ``fault`` (replacing what was known of its tier), stamped with the tier's
    setting now."""
    cluster = policy.cluster(fault.cluster)
    if cluster is None:
        return
    stamped = evolve(fault, setting=setting(cluster, fault.qos))
    kept = [t for t in read(state_dir) if (t.cluster, t.qos) != (fault.cluster, fault.qos)]
    _write(state_dir, [*kept, stamped])


def clear(state_dir: str, cluster: str, qos: str | None) -> None:
    """Forget what was known of ``qos`` on ``cluster`` (it passed ``eps check``)."""
    known = read(state_dir)
    kept = [t for t in known if (t.cluster, t.qos) != (cluster, qos)]
    if len(kept) != len(known):
        _write(state_dir, kept)


def current(state_dir: str, policy: Policy) -> tuple[TierFault, ...]:
    """The remembered faults that still apply: their cluster is configured and renders the
    tier as it did when the cluster refused it."""
    out = []
    for t in read(state_dir):
        cluster = policy.cluster(t.cluster)
        if cluster is not None and t.setting == setting(cluster, t.qos):
            out.append(t)
    return tuple(out)


def known(snapshot: CapacitySnapshot, state_dir: str, policy: Policy) -> CapacitySnapshot:
    """``snapshot`` with the faults that still apply (after any it already held)."""
    found = current(state_dir, policy)
    return evolve(snapshot, faults=(*snapshot.faults, *found)) if found else snapshot
