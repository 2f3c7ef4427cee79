"""``eps simulate``: the cluster's own history replayed against other park caps (P8).

The model is :mod:`eps.core.simulate` (its docstring states every rule and the estimator);
the history comes from :mod:`eps.shell.service.history` (for a cluster reached through a robot
login, which runs no sacct, from the ledger alone, and the output says so).  This module
parses nothing but the namespace, and renders: a table per run (one row per cap setting), the honest limits under
it, ``--json`` (``eps schema simulate``) and ``--plot FILE.png`` (the ``eps[plot]`` extra).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from eps.core.model import ClusterConfig
from eps.core.simulate import Caps, SettingResult, Simulation, Wait, default_settings, simulate
from eps.shell.cli.exits import SCHEMA_VERSION, Exit, write_error
from eps.shell.config.settings import Settings
from eps.shell.service.errors import UsageError

if TYPE_CHECKING:
    from eps.shell.service.check import LaneOptions  # the service's re-export: a front door imports no lane

#: The paid lane's list price per GPU-hour: GCP a3-highgpu on-demand (information only, P12).
PRICE_MACHINE = "a3-highgpu-1g"


def _cluster_name(ns: argparse.Namespace, settings: Settings) -> str:
    names = [c.name for c in settings.policy.clusters if c.qos_ladder]
    if ns.cluster is not None:
        if ns.cluster not in names:
            known = ", ".join(names)
            raise UsageError(f"eps simulate: no SLURM cluster {ns.cluster!r} with a QoS ladder (known: {known})")
        return str(ns.cluster)
    if not names:
        raise UsageError("eps simulate: no SLURM cluster with a QoS ladder is configured")
    return names[0]


def _history(
    ns: argparse.Namespace, settings: Settings, cluster: ClusterConfig, since: float, now: float,
    lane_options: LaneOptions | None,
) -> tuple[list[Wait], dict[str, Any]] | None:
    """The waits to replay and where they came from: a sacct file, the cluster's sacct through
    its login, or (a robot login, which runs no sacct) nothing but what the ledger adds.
    ``None``: sacct did not answer (said on stderr)."""
    from eps.shell.service import history
    try:
        return _read_history(ns, settings, cluster, since, now, lane_options)
    except history.HistoryError as exc:
        raise UsageError(f"eps simulate: {exc}") from None


def _read_history(
    ns: argparse.Namespace, settings: Settings, cluster: ClusterConfig, since: float, now: float,
    lane_options: LaneOptions | None,
) -> tuple[list[Wait], dict[str, Any]] | None:
    from eps.shell.service import history
    name = cluster.name
    if ns.sacct:
        return history.read_file(ns.sacct), {"kind": "sacct_file", "path": ns.sacct, "cluster": name}
    if cluster.robot:  # sbatch, scancel, squeue and rsync only there: the ledger is the history
        if ns.ledger is False:
            raise UsageError(f"eps simulate: {name} is reached through a robot login, which runs no sacct: the "
                             "ledger is its only history (drop --no-ledger, or give --sacct FILE)")  # fmt: skip
        return [], {"kind": "ledger", "cluster": name, "since_s": ns.since, "note": history.ROBOT_NOTE}
    from returns.result import Failure, Success

    access = settings.cluster_access(name)
    runner = getattr(lane_options, "slurm_runner", None)
    match history.read_login(access.login, since, now, all_users=ns.all_users, user=access.user, runner=runner):
        case Success(found):
            return found, {"kind": "cluster", "cluster": name, "since_s": ns.since, "all_users": ns.all_users}
        case Failure(failure):
            write_error(sys.stderr, as_json=ns.json, code=str(failure.kind), exit_code=Exit.NOTHING_STARTS,
                        text=f"sacct on {name}: {failure.message}", prefix="eps: error: ")  # fmt: skip
    return None


def run_simulate(
    ns: argparse.Namespace, settings: Settings, env: Mapping[str, str], lane_options: LaneOptions | None
) -> int:
    from eps.shell.service import history
    name = _cluster_name(ns, settings)
    cluster = next(c for c in settings.policy.clusters if c.name == name)
    now = time.time()
    since = now - ns.since
    read = _history(ns, settings, cluster, since, now, lane_options)
    if read is None:
        return Exit.NOTHING_STARTS
    waits, source = read
    from_sacct = len(waits)
    use_ledger = ns.ledger if ns.ledger is not None else not ns.sacct  # it joins a file only when asked
    if use_ledger:
        try:
            mine = history.read_ledger(settings.state_dir, settings.policy, name, since, settings.state_url)
            waits = history.merge(waits, mine)
        except history.LedgerUnread as exc:
            raise UsageError(f"eps simulate: {exc} (--no-ledger leaves it out)") from None
    source["ledger_waits"] = len(waits) - from_sacct
    caps = tuple(ns.caps) if ns.caps else default_settings(cluster.first_park_cap_s, cluster.next_park_cap_s)
    machine = settings.policy.gcp_machine(PRICE_MACHINE)
    price = machine.on_demand_per_hour / max(1, machine.gpus) if machine else 0.0
    sim = simulate(waits, cluster.qos_ladder, caps, seed=ns.seed, rounds=ns.rounds, all_jobs=ns.all_jobs,
                   price_per_gpu_hour=price)  # fmt: skip
    recorded = Caps(cluster.first_park_cap_s, cluster.next_park_cap_s)
    plotted = None
    if ns.plot:
        plotted = _plot(sim, ns.plot)
    if ns.json:
        doc = simulate_doc(sim, source, recorded, price)
        doc["plot"] = plotted
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        from eps.shell.render.table import width_for

        sys.stdout.write(text_of(sim, source, recorded, price, width_for(sys.stdout, env, wide=ns.wide)))
        if plotted:
            sys.stdout.write(f"plot: {plotted}\n")
    return Exit.OK


def _caps_doc(c: Caps) -> dict[str, int | None]:
    return {"first_s": c.first_s, "next_s": c.next_s}


def setting_doc(s: SettingResult) -> dict[str, Any]:
    return {
        "caps": _caps_doc(s.caps),
        "effective_next_s": s.caps.effective_next_s,
        "worst_case_s": s.worst_case_s,
        "jobs": s.jobs,
        "replays": s.replays,
        "median_start_s": s.median_start_s,
        "p90_start_s": s.p90_start_s,
        "max_start_s": s.max_start_s,
        "paid_share": round(s.paid_share, 4),
        "never_share": round(s.never_share, 4),
        "paid_gpu_hours": s.paid_gpu_hours,
        "paid_unknown_runs": s.paid_unknown_runs,
        "paid_list_usd": s.paid_list_usd,
        "lanes": {lane: round(share, 4) for lane, share in s.lanes},
        "dispatches": [
            {"dispatch": o.dispatch, "lane": o.lane, "start_s": o.start_s, "drawn": o.drawn} for o in s.first_round
        ],
    }


def simulate_doc(sim: Simulation, source: Mapping[str, Any], recorded: Caps, price: float) -> dict[str, Any]:
    """The ``--json`` document (``eps schema simulate``)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "source": dict(source),
        "ladder": list(sim.ladder),
        "recorded": _caps_doc(recorded),
        "estimator": sim.estimator,
        "seed": sim.seed,
        "rounds": sim.rounds,
        "price_per_gpu_hour": round(price, 4),
        "settings": [setting_doc(s) for s in sim.settings],
        "history": {
            "tiers": [
                {"tier": t.tier, "waits": t.waits, "started": t.started, "censored": t.censored} for t in sim.tiers
            ],
            "dispatches": sim.dispatches,
            "other_qos_jobs": sim.other_qos_jobs,
        },
        "warning": sim.warning,
    }


def _s(v: int | None) -> str:
    return "never" if v is None else f"{v} s"


def text_of(sim: Simulation, source: Mapping[str, Any], recorded: Caps, price: float, width: int | None) -> str:
    import textwrap

    from eps.shell.render.table import Column, render

    def para(text: str) -> str:
        return (textwrap.fill(text, width, subsequent_indent="  ") if width else text) + "\n"

    where = source.get("path") or (
        f"the ledger alone ({source['note']})" if source["kind"] == "ledger" else f"sacct on {source['cluster']}")
    out = para(f"eps simulate: {sim.dispatches} dispatches from {where} down {' -> '.join(sim.ladder)}, "
               f"{sim.rounds} rounds of draws (seed {sim.seed})") + "\n"  # fmt: skip
    cols = [Column("caps (s)", keep=True), Column("worst", right=True), Column("median", right=True),
            Column("p90", right=True), Column("paid", right=True), Column("paid GPU-h", right=True),
            Column("list price", right=True), Column("starts on", flex=True)]  # fmt: skip
    rows = []
    for s in sim.settings:
        mark = " (now)" if s.caps == recorded else ""
        where_ = ", ".join(f"{lane} {share:.0%}" for lane, share in s.lanes if share)
        rows.append([s.caps.label() + mark, _s(s.worst_case_s) if s.worst_case_s is not None else "unbounded",
                     _s(s.median_start_s), _s(s.p90_start_s), f"{s.paid_share:.1%}", f"{s.paid_gpu_hours:g}",
                     f"${s.paid_list_usd:,.2f}", where_ or "-"])  # fmt: skip
    out += render(cols, rows, width) + "\n"
    hist = ", ".join(f"{t.tier} {t.waits} waits ({t.censored} censored)" for t in sim.tiers)
    out += para(f"history: {hist}; {sim.other_qos_jobs} jobs on QoS outside the ladder left out")
    out += para(f"estimator: {sim.estimator}")
    out += para(f"list price: ${price:.2f} per GPU-hour on the paid lane ({PRICE_MACHINE} on-demand), "
                "information only")  # fmt: skip
    if sim.warning:
        out += para(f"warning: {sim.warning}")
    return out


def _plot(sim: Simulation, path: str) -> str:
    """Each setting's time-to-start distribution (empirical CDF), side by side; needs matplotlib."""
    try:
        import matplotlib as mpl

        mpl.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("eps simulate --plot needs matplotlib: pip install 'eps[plot]'") from None
    fig, ax = plt.subplots(figsize=(8, 5))
    for s in sim.settings:
        starts = sorted(o.start_s for o in s.first_round if o.start_s is not None)
        n = len(s.first_round) or 1
        ax.step(starts, [(i + 1) / n for i in range(len(starts))], where="post", label=s.caps.label())
    ax.set_xlabel("time to start (s)")
    ax.set_ylabel("share of dispatches started")
    ax.set_title(f"eps simulate: {sim.dispatches} dispatches, round 0 of {sim.rounds}")
    ax.legend(title="caps first/next (s)")
    try:
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise UsageError(f"eps simulate --plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path
