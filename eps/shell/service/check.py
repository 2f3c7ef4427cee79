"""The ``check`` operation (``eps check``, the MCP tool ``check``): which lanes this machine
can use, and the exact step that fixes each of the others.  It creates nothing: it reads
the settings, looks for credentials where the providers keep them, and asks each lane
that is set up one read-only question, all at once and each within ``--timeout``:

- a SLURM cluster: its QoS grants through the login prefix (``sacctmgr show assoc``),
  which shows both that the prefix answers and what the ladder may use;
- GCP: the instances eps made (one listing; proves the project and the credentials);
- RunPod: the pods (one ``GET /v2/pods``; proves the key is accepted).

For a SLURM cluster it also tests each tier eps would use with ``sbatch --test-only`` of
the exact script eps would submit: a tier the cluster says is set up wrong (its partition,
account) makes the lane ``misconfigured``, with the fix.

A cluster reached through a robot login (``access = "robot"``: sbatch, scancel, squeue, scp
and rsync only) proves its login answers with ``squeue``, takes its grants from the config
(``[[clusters]] grants``, a grants file) or the built-in table, and tests each tier as above;
its row's ``not_checked`` says what a robot login cannot show (the live grants: no sacctmgr).

``ok`` only when every resource kind (CPU, GPU) has at least one usable lane in its
automatic lane order and no cluster is misconfigured (``eps check`` then exits 0; 1 otherwise).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from returns.result import Failure, Success

from eps.core.model import DownCode, LaneDown, LaneKind
from eps.shell.config.settings import Settings
from eps.shell.state.events import SCHEMA_VERSION

if TYPE_CHECKING:
    from eps.core.model import ClusterConfig

    # Re-exported (mypy: ``as`` itself): the front doors name the lanes' options from here, importing no lane.
    from eps.shell.lanes import LaneOptions as LaneOptions  # noqa: PLC0414
    from eps.shell.lanes import Lanes
    from eps.shell.lanes.slurm.lane import SlurmLane

#: What a lane's probe answers: (usable, what it said, the fix when a setting is wrong, per-tier findings).
Answer = tuple[bool, str, str | None, list[dict[str, Any]]]


def _tiers(lanes: Lanes, name: str, lane: SlurmLane, granted: set[str]) -> tuple[list[dict[str, Any]], str | None]:
    """Each tier eps would submit under on cluster ``name`` (its granted ladder tiers, or its one
    queue), tested with ``sbatch --test-only`` of the exact script eps renders: the findings,
    and the fix of the first that the cluster says is set up wrong.  What the cluster says
    is remembered for ``eps plan`` and ``eps execute`` (:mod:`eps.shell.run.cluster_faults`)."""
    from eps.core.model import TierFault
    from eps.core.outcome import FailureKind, misconfigured_fix
    from eps.shell.run import cluster_faults
    cluster = _cluster(lanes, name)
    tiers: list[str | None] = [q for q in cluster.qos_ladder if q in granted] if cluster.qos_ladder else [None]
    state_dir = lanes.settings.state_dir
    found, first_fix = [], None
    for qos in tiers:
        failure = lane.check_tier(qos)
        if failure is None:
            cluster_faults.clear(state_dir, name, qos)
            found.append({"qos": qos, "ok": True, "text": "sbatch --test-only accepts the script eps submits",
                          "fix": None})  # fmt: skip
            continue
        fix = misconfigured_fix(name, failure.code) if failure.kind is FailureKind.MISCONFIGURED else None
        if fix is not None:
            cluster_faults.record(state_dir, lanes.policy, TierFault(name, qos, failure.message, fix))
            first_fix = first_fix or fix
        found.append({"qos": qos, "ok": False, "text": f"{failure.kind.value}: {failure.message}", "fix": fix})
    return found, first_fix


def _cluster(lanes: Lanes, name: str) -> ClusterConfig:
    """Cluster ``name``'s config (a cluster's lane is one of the policy it was opened with)."""
    return cast("ClusterConfig", lanes.policy.cluster(name))


def _probe(lanes: Lanes, name: str) -> Callable[[], Answer]:
    """The one read-only question for lane ``name`` (a cluster: its grants, then a
    ``sbatch --test-only`` of each tier it would use)."""
    kind = lanes.policy.lane_kind(name)

    def ask() -> Answer:
        if kind is LaneKind.VM:
            return True, "local subprocesses on this machine (trivial CPU ops, P2)", None, []
        lane = lanes.get(name)
        if kind is LaneKind.SLURM:
            client = getattr(lane, "client", None)
            if client is None:  # a test's stand-in
                return True, "set up", None, []
            cluster = cast("SlurmLane", lane)  # a cluster's lane with a client: eps's own
            if client.robot:
                return _robot(lanes, name, cluster)
            from eps.shell.lanes.registry import cluster_user

            match client.discover_grants(cluster_user(lanes, name)):
                case Success(grants):
                    tiers = grants.tiers(name) or (grants.clusters[0][1] if len(grants.clusters) == 1 else ())
                    ladder = _cluster(lanes, name).qos_ladder
                    missing = [q for q in ladder if q not in {t.name for t in tiers}]
                    said = "QoS granted: " + (", ".join(t.name for t in tiers) or "none")
                    if missing:
                        said += f"; not granted: {', '.join(missing)} (the ladder skips them, P9)"
                    if not tiers:
                        return False, said, None, []
                    found, fix = _tiers(lanes, name, cluster, {t.name for t in tiers})
                    wrong = [f"{t['qos'] or 'queue'}: {t['text']}" for t in found if not t["ok"]]
                    if wrong:
                        said += "; the cluster refuses what eps would submit: " + "; ".join(wrong)
                    return not wrong, said, fix, found
                case Failure(f):
                    return False, f"did not answer: {f.message}", None, []
        match lane.inventory(None):
            case Success(items):
                return True, f"answered; {len(items)} machine(s) of eps there now", None, []
            case Failure(f):
                return False, f"{f.kind.value}: {f.message}", None, []
        raise AssertionError("unreachable")  # pragma: no cover

    return ask


def _robot(lanes: Lanes, name: str, lane: SlurmLane) -> Answer:
    """A robot login's answer: squeue (its jobs of eps), the grants of the config or the built-in
    table (no sacctmgr there), each tier's ``sbatch --test-only``."""
    from eps.core.names import PREFIX
    from eps.core.tables import DEFAULT_GRANTS
    from eps.shell.config.availability import fix_config
    from eps.shell.config.settings import ConfigError
    from eps.shell.config.snapshots import configured_tiers

    match lane.client.list_by_name(PREFIX):
        case Failure(f):
            return False, f"did not answer squeue: {f.message}", None, []
        case Success(jobs):
            said = f"robot login: squeue answered ({len(jobs)} job(s) of eps there now)"
    try:
        tiers = configured_tiers(lanes.settings, name)
    except ConfigError as exc:
        return False, f"{said}; its grants file: {exc}", fix_config(lanes.settings, f"a readable grants file as "
                                                                    f"{name}'s [[clusters]] grants"), []  # fmt: skip
    source = f"from {lanes.settings.cluster_access(name).grants}"
    if tiers is None:
        tiers, source = DEFAULT_GRANTS.tiers(name), "from eps's built-in table"
    ladder = _cluster(lanes, name).qos_ladder
    if ladder and not tiers:
        said += "; no QoS grants: a robot login runs no sacctmgr, and eps has none built in for it"
        return False, said, fix_config(lanes.settings, f'grants = "PATH" (a grants file, the format of --grants) to '
                                                       f"{name}'s [[clusters]] entry"), []  # fmt: skip
    if ladder:
        said += f"; QoS granted ({source}): " + ", ".join(t.name for t in tiers)
    found, fix = _tiers(lanes, name, lane, {t.name for t in tiers})
    wrong = [f"{t['qos'] or 'queue'}: {t['text']}" for t in found if not t["ok"]]
    if wrong:
        said += "; the cluster refuses what eps would submit: " + "; ".join(wrong)
    return not wrong, said, fix, found


def not_checked(settings: Settings, name: str) -> list[str]:
    """What ``eps check`` cannot make of cluster ``name`` (a robot login), one line each."""
    cluster = settings.policy.cluster(name)
    if cluster is None or not cluster.robot:
        return []
    path = settings.cluster_access(name).grants
    source = f"its grants file {path}" if path else "eps's built-in table (none: give [[clusters]] grants)"
    return [f"the live QoS grants and limits (a robot login runs no sacctmgr): eps takes them from {source}",
            "eps ssh into its jobs (a robot login allows no shell); logs, pull and cancel work by rsync and scancel",
            "the job history for eps simulate (no sacct): eps simulate uses the ledger alone"]  # fmt: skip


def _fix_unreachable(settings: Settings, name: str, kind: LaneKind | None) -> str:
    if kind is LaneKind.SLURM:
        login = " ".join(settings.cluster_access(name).login)
        if (cluster := settings.policy.cluster(name)) is not None and cluster.robot:
            return f"make `{(login + ' ') if login else ''}squeue --me` work from this machine (the robot key)"
        return f"make `{(login + ' ') if login else ''}sacctmgr show assoc user=$USER` work from this machine"
    if kind is LaneKind.GCP:
        return "check the project id and that the credentials may list Compute Engine instances in it"
    return "check the key (RunPod console: Settings, API Keys) and that this machine reaches RunPod"


def gather(settings: Settings, env: dict[str, str], options: LaneOptions | None, timeout_s: float) -> dict[str, Any]:
    """Every lane's answers, as the ``check`` document."""
    from eps.core.model import evolve
    from eps.shell.lanes import LaneOptions, Lanes

    opts = LaneOptions(env=env) if options is None else evolve(options, env=options.env or env)
    lanes = Lanes(settings, opts)
    names = lanes.names()
    downs: dict[str, LaneDown | None] = {n: lanes.down(n) for n in names}
    answers: dict[str, Answer] = {}

    def run(name: str) -> None:
        try:
            answers[name] = _probe(lanes, name)()
        except Exception as exc:  # a probe must never stop the others
            answers[name] = (False, f"{type(exc).__name__}: {exc}", None, [])

    # Every lane asked at once, each within the timeout; daemon threads, so a lane that
    # hangs never holds the command open.
    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in names if downs[n] is None]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    rows = [_row(settings, n, downs[n], answers.get(n), timeout_s) for n in names]
    if not any(t.is_alive() for t in threads):
        lanes.close()
    usable = {
        "cpu": [n for n in settings.policy.cpu_lane_order if any(r["lane"] == n and r["usable"] for r in rows)],
        "gpu": [n for n in settings.policy.gpu_lane_order if any(r["lane"] == n and r["usable"] for r in rows)],
    }
    # A free cluster eps would submit to wrongly is never fine, whatever else works: the fix is the config's
    wrong = any((r["problem"] or {}).get("code") == "misconfigured" for r in rows)
    return {"schema_version": SCHEMA_VERSION, "lanes": rows, "usable": usable, "ok": all(usable.values()) and not wrong,
            "left_out": _left_out(settings)}  # fmt: skip


def _left_out(settings: Settings) -> list[dict[str, str]]:
    """The configured clusters no lane order names (``eps plan`` skips them), with the fix."""
    from eps.shell.config.availability import fix_config
    from eps.shell.config.lane_settings import left_out

    order = settings.policy.gpu_lane_order
    out = []
    for name in left_out(settings.policy):
        paid = [x for x in order if x == "gcp"]
        with_it = ", ".join(f'"{x}"' for x in [*(x for x in order if x != "gcp"), name, *paid])
        out.append({"lane": name, "code": "not_in_lane_order",
                    "text": f"{name} is in no GPU lane order ({', '.join(order)}): eps plan skips it; "
                            f"only --pin {name} reaches it",
                    "fix": fix_config(settings, f"[lanes] gpu = [{with_it}]")})  # fmt: skip
    return out


def _resources(settings: Settings, name: str) -> list[str]:
    p = settings.policy
    out = []
    if name in p.cpu_lane_order or name == p.trivial_lane:
        out.append("cpu")
    if name in p.gpu_lane_order or name == "runpod":
        out.append("gpu")
    return out


def _row(
    settings: Settings,
    name: str,
    down: LaneDown | None,
    answer: Answer | None,
    timeout_s: float,
) -> dict[str, Any]:
    kind = settings.policy.lane_kind(name)
    needs_key = kind in (LaneKind.GCP, LaneKind.RUNPOD)
    row: dict[str, Any] = {
        "lane": name,
        "kind": kind.value if kind else None,
        "resources": _resources(settings, name),
        "configured": True,
        "credentials": True if needs_key else None,
        "reachable": None,
        "usable": False,
        "detail": None,
        "problem": None,
        "fix": None,
    }
    if skipped := not_checked(settings, name):
        row["not_checked"] = skipped
    if down is not None:
        row["configured"] = down.code is not DownCode.NOT_CONFIGURED
        if down.code is DownCode.NOT_CONFIGURED:
            row["credentials"] = None
        elif down.code is DownCode.NO_CREDENTIALS:
            row["credentials"] = False
        row["problem"] = {"code": down.code.value, "text": down.reason}
        row["fix"] = down.fix
        return row
    if answer is None:
        answer = (False, f"no answer within {timeout_s:g} s", None, [])
    ok, said, fix, tiers = answer
    row["reachable"] = ok or fix is not None
    row["usable"] = ok
    row["detail"] = said
    if tiers:
        row["tiers"] = tiers
    if fix is not None:  # it answered, and says a setting of eps's config is wrong
        row["problem"] = {"code": "misconfigured", "text": said}
        row["fix"] = fix
    elif not ok:
        row["problem"] = {"code": DownCode.LANE_DOWN.value, "text": said}
        row["fix"] = _fix_unreachable(settings, name, kind)
    return row
