"""Generated blocks: text rendered from the code tables, kept inside the docs between markers.

Like cog: ``<!-- eps:begin NAME -->`` ... ``<!-- eps:end NAME -->`` hold the
output of ``RENDERERS[NAME](facts)``; ``workflow_lint --fix`` rewrites them in
place and ``--check`` reports a block whose text differs.  Renders are
deterministic: code-table order for intents and tiers (that order is policy),
sorted order for sets, and tables padded to fixed column widths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from eps.core.durations import format_duration
from eps.core.gpus import GpuNeed, gcp_gpu_machines, runpod_gpu_types
from eps.core.model import GcpMachine, Intent, Resource
from eps.lint.docs import Doc
from eps.lint.facts import PolicyFacts, park_cap_settings

Renderer = Callable[[PolicyFacts], list[str]]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table padded to fixed column widths."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in rows)]


def span(seconds: int | None) -> str:
    """A limit as the tables show it: the core's one duration form (``7d``), or ``none``."""
    return "none" if seconds is None else format_duration(seconds)


def provisioning_words(intent: Intent, facts: PolicyFacts) -> str:
    """How GCP provisions the intent's machine (P4, P11), in the words the intent table uses:
    the same cases as ``eps.core.paid_lanes`` (spot for short or restartable jobs; then
    on-demand where GCP sells it; else flex-start for long non-restartable ones, up to
    flex-start's maximum run duration)."""
    machines = intent_machines(intent, facts)
    if not machines:
        return "-"
    if not intent.spot_eligible:
        return "on-demand only"
    flex = [m for m in machines if not m.on_demand_offered and m.flex_start_offered]
    upto = f"up to {span(facts.flex_start_max_s)}"
    if flex and len(flex) == len(machines):
        return f"spot if short or restartable, else flex-start ({upto})"
    if flex:
        return f"spot if short or restartable, then on-demand; else flex-start where no on-demand ({upto})"
    if not any(m.on_demand_offered for m in machines):
        return "spot only (short or restartable)"
    return "spot if short or restartable, then on-demand"


def intent_machines(intent: Intent, facts: PolicyFacts) -> list[GcpMachine]:
    """The GCP machine types the planner offers the intent with its default need: its own
    (CPU work), or every GPU family's machine type that satisfies it (``eps.core.gpus``)."""
    if intent.resource is Resource.GPU:
        need = GpuNeed(intent.gpu_models, intent.gpu_mem_gb)
        return list(gcp_gpu_machines(facts.policy, need, intent.gpus))
    machine = facts.policy.gcp_machine(intent.gcp_machine) if intent.gcp_machine else None
    return [machine] if machine is not None else []


def machine_words(intent: Intent, facts: PolicyFacts) -> str:
    """The intent table's GCP machine cell: ``a2-ultragpu-1g, a3-highgpu-1g`` (ticks added by the table)."""
    return ", ".join(m.name for m in intent_machines(intent, facts)) or "-"


def kind_words(intent: Intent) -> str:
    """The intent table's kind cell: ``4 vCPU, 16 GB``; ``1 GPU of 80+ GB, 200 GB disk``."""
    if intent.resource is Resource.GPU:
        what = " or ".join(intent.gpu_models) if intent.gpu_models else "GPU"
        kind = f"{intent.gpus} {what}" + (f" of {intent.gpu_mem_gb}+ GB" if intent.gpu_mem_gb else "")
    else:
        kind = f"{intent.vcpus} vCPU, {intent.mem_gb} GB"
    return kind + (f", {intent.disk_gb} GB disk" if intent.disk_gb is not None else "")


def runpod_words(intent: Intent, facts: PolicyFacts) -> str:
    if intent.resource is Resource.GPU:
        need = GpuNeed(intent.gpu_models, intent.gpu_mem_gb)
        types = [g.id for g in runpod_gpu_types(facts.policy, need, intent.gpus)]
        return (", ".join(types) or "-") + " (pin only)"
    return ", ".join(intent.runpod_cpu) or "-"


INTENT_HEADER = ("intent", "kind", "auto lanes", "GCP machine", "GCP provisioning", "RunPod", "what for")


def render_intents(facts: PolicyFacts) -> list[str]:
    rows = []
    for it in facts.policy.intents:
        machines = machine_words(it, facts)
        rows.append(
            (
                f"`{it.name}`",
                kind_words(it),
                " -> ".join(facts.intent_lanes(it)),
                ", ".join(f"`{m}`" for m in machines.split(", ")) if machines != "-" else "-",
                provisioning_words(it, facts),
                runpod_words(it, facts),
                it.description.replace("|", "/"),
            )
        )
    return table(INTENT_HEADER, rows)


def render_lane_orders(facts: PolicyFacts) -> list[str]:
    p, th = facts.policy, facts.policy.thresholds
    return [
        f"- GPU auto lane order: ({', '.join(p.gpu_lane_order)})",
        f"- CPU lane order: ({', '.join(p.cpu_lane_order)})",
        f"- Trivial CPU ops (at most {th.trivial_op_s} s and {th.big_footprint_gb} GB, fitting the VM's memory "
        f"and free disk with a {th.vm_disk_margin_gb} GB margin): ({p.trivial_lane})",
    ]


def _formula(first: int, nxt: int, tiers: int) -> str:
    if tiers <= 1:
        return f"{first}"
    return f"{first} + {tiers - 1} x {nxt}"


def render_qos_ladder(facts: PolicyFacts) -> list[str]:
    out: list[str] = []
    for c in facts.ladder_clusters:
        tiers = facts.tiers(c.name)
        rows = []
        for i, qos in enumerate(c.qos_ladder, 1):
            t = tiers.get(qos)
            cap = c.first_park_cap_s if i == 1 else c.later_park_cap_s
            rows.append(_tier_row(str(i), qos, t, f"{cap} s"))
        if c.dev_qos:
            rows.append(_tier_row("dev", c.dev_qos, tiers.get(c.dev_qos), f"{c.later_park_cap_s} s"))
        (first_env, first), (next_env, nxt) = park_cap_settings(c)
        worst = facts.worst_case_s(c.name)
        if out:
            out.append("")
        out += [f"{c.name} QoS ladder: {' -> '.join(c.qos_ladder)}", ""]
        out += table(("rung", "QoS", "priority", "MaxWall", "GPUs per user", "park cap"), rows)
        out += [
            "",
            f"- Rung 1 park cap: {first} s (`{first_env}`)",
            f"- Rungs 2+ park cap: {nxt} s (`{next_env}`), never longer than rung 1's: "
            f"each later rung waits min({first}, {nxt}) = {c.later_park_cap_s} s",
            f"- Worst-case wait before a job leaves {c.name}: "
            f"{_formula(first, c.later_park_cap_s, len(c.qos_ladder))} = {worst} s",
        ]
        if c.dev_qos:
            switch = "on" if c.dev_qos_for_debug else "off"
            dev = ", ".join(f"`{i.name}`" for i in facts.policy.intents if i.dev_qos_ok) or "none"
            out.append(
                f"- Dev QoS {c.dev_qos}: only for the intents marked for it ({dev}), only when the dev-QoS switch "
                f"`dev_qos_for_debug` is on (here: {switch}; default off); then it sits right after "
                f"{c.qos_ladder[0]} with a {c.later_park_cap_s} s park cap"
            )
        out.append(
            f"- Early advance on a self-cap pending reason (`advance_on_self_cap`): "
            f"{'on' if c.advance_on_self_cap else 'off'} (default off)"
        )
    return out or ["(no cluster has a QoS ladder)"]


def render_cluster_rules(facts: PolicyFacts) -> list[str]:
    """Each SLURM cluster's row as the renders apply it (eps.core.tables, eps.core.sbatch)."""
    from eps.core.ladder import preempted_by
    from eps.core.sbatch import FORBIDDEN_ENV

    out: list[str] = []
    for c in facts.policy.clusters:
        tiers: list[str | None] = [*c.qos_ladder, *([c.dev_qos] if c.dev_qos else [])] or [None]
        rows = []
        for qos in tiers:
            by = () if qos is None else preempted_by(c, qos, tuple(facts.tiers(c.name).values()))
            rows.append((qos or "(its queue)", f"`{c.partition_for(qos) or '(the default)'}`",
                         f"`{c.account_for(qos)}`" if c.account_for(qos) else "none: the user's default",
                         f"by {', '.join(by)}" if by else "no"))  # fmt: skip
        if out:
            out.append("")
        out += [f"{c.name}:", ""]
        out += table(("tier", "partition", "account", "preemptible"), rows)
        sizes = []
        for n in sorted({1, c.gpus_per_node}):
            mem, cpus = c.resources(n)
            sizes.append(f"{n} GPU: {'--mem=' + str(mem) + 'G' if mem else 'no --mem'}, "
                         f"{'--cpus-per-task=' + str(cpus) if cpus else 'no --cpus-per-task'}")  # fmt: skip
        per_gpu = "not set (the cluster's default)" if c.mem_per_gpu_gb is None else (
            f"{c.mem_per_gpu_gb} GB per GPU, at most {c.mem_max_gb} GB a job"
            + (f" (the cluster's ceiling: {c.mem_max_per_gpu_gb} GB per GPU)" if c.mem_max_per_gpu_gb else "")
        )  # fmt: skip
        env = ", ".join(f"`{k}={v}`" for k, v in c.job_env) or "none"
        multi = ", ".join(f"`{k}={v}`" for k, v in c.multi_gpu_env) or "none"
        out += [
            "",
            f"- Memory: {per_gpu}; never `--mem=0`. CPUs: "
            + (f"{c.cpus_per_gpu} per GPU, at most {c.cpus_max}" if c.cpus_per_gpu else "not set")
            + f" ({'; '.join(sizes)})",
            f"- Exported in the script body (never `--export`): {env}; multi-GPU jobs also {multi}",
            f"- Never set: {', '.join(f'`{n}`' for n in sorted(FORBIDDEN_ENV))} (SLURM sets it)",
            f"- Job name: `eps-<dispatch>{'-<user>' if c.user_in_job_name else ''}`; cancels are "
            "`scancel -u <user> <id>` (self-scoped)",
            f"- Submissions from one host: one sbatch at a time, at least {c.submit_gap_s:g} s apart",
            f"- Cleanup trap (SIGTERM/SIGINT/SIGQUIT to the script's process group): "
            f"{'yes' if c.cleanup_trap else 'no'}; SLURM's own requeue: never (`--no-requeue`)",
            f"- Access: {c.access}",
        ]
    return out or ["(no SLURM cluster)"]


def _tier_row(rung: str, qos: str, tier: object, cap: str) -> tuple[str, ...]:
    from eps.core.model import QosTier

    if not isinstance(tier, QosTier):
        return (rung, qos, "-", "-", "-", cap)
    gpus = "no cap" if tier.max_gpus_per_user is None else str(tier.max_gpus_per_user)
    return (rung, qos, str(tier.priority), span(tier.max_wall_s), gpus, cap)


def render_pending_reasons(facts: PolicyFacts) -> list[str]:
    rows = [(f"`{r}`", "advance at once: this tier can never run the job") for r in sorted(facts.never_runs)]
    self_cap = "wait (your own jobs fill this tier's per-user cap); advance at once only with `advance_on_self_cap`"
    rows += [(f"`{r}`", self_cap) for r in sorted(facts.self_cap)]
    rows.append(("any other (`Priority`, `Resources`, ...)", "wait until the park cap is spent, then advance"))
    return table(("pending reason", "what eps does"), rows)


def render_lint_rules(rule_rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """The rule registry (code, name, what it checks), passed in: the registry's rules read
    these blocks, so this module cannot import them."""
    return table(("code", "rule", "checks"), [(f"`{code}`", name, checks) for code, name, checks in rule_rows])


def render_job_lifecycle(facts: PolicyFacts) -> list[str]:
    """The numbers of a job's life (eps.core.tables.JOB_LIFECYCLE), as CLAUDE.md states them."""
    life = facts.lifecycle
    gib = life.workdir_max_bytes / 2**30
    rows = [
        ("time limit (`--time-limit`)", f"{life.time_limit_pct / 100:g} x `--duration` unless given"),
        ("time limit without `--duration`", "the lane's maximum: the tier's MaxWall, flex-start's "
         f"{format_duration(facts.flex_start_max_s)}, else `[jobs] max_time_limit` "
         f"({format_duration(facts.policy.max_time_limit_s)})"),
        ("after the time limit", f"SIGTERM, then SIGKILL {life.kill_grace_s} s later; status `timed out`"),
        ("linger after the job ended", f"{life.linger_s} s (`[jobs] linger_s`): the machine waits for the pull"),
        ("a machine with no job", f"stops itself {life.launch_grace_s} s after it came up (eps died before the "
                                  "launch)"),
        ("workdir limit", f"{gib:g} GiB after `.gitignore`/`.epsignore` (the {life.workdir_biggest_named} biggest "
                          "files named when over)"),
    ]  # fmt: skip
    return table(("what", "value"), rows)


def render_healing(facts: PolicyFacts) -> list[str]:
    """The retry numbers (eps.core.tables.HEALING), as CLAUDE.md states them."""
    from eps.core.tables import HEALING as h

    rows = [
        ("a `--restartable` job without `--retry`", f"relaunched after an interruption, at most "
         f"{h.restartable_restarts} times"),
        ("any other job without `--retry`", "never relaunched"),
        ("`--retry EVENT[,EVENT]` without `--max-restarts`", f"at most {h.max_restarts} restarts"),
        ("`--retry-for` (from submission)", f"{format_duration(h.retry_for_s)} unless given"),
        ("outputs synced while the job runs (`--sync-every`)", f"every {h.sync_every_s} s unless given or "
         "`[jobs] sync_every_s` says (0: never)"),
        ("`--retry no-capacity`: every rung exhausted", f"waits {h.capacity_wait_first_s} s "
         "(`[jobs] capacity_wait_s`), doubling up to "
         f"{h.capacity_wait_max_s} s, then plans again from the top, until `--retry-for`; then the exhausted "
         "terminal"),
        ("a boot loop (skip code `boot_loop`)", f"{h.boot_loop_deaths} machines of a rung lost within "
         f"{format_duration(h.early_death_s)} of coming up, within {format_duration(h.boot_loop_window_s)}: "
         "every dispatch skips the rung until they are that old; a pin is exempt"),
        ("a wedged machine (GCP VM, RunPod pod)", f"the provider says running, ssh unanswered for {h.wedge_s} s "
         "(`[jobs] wedge_s`) while its job runs: released, handled as an interruption (outcome `wedged`)"),
        ("a stalled job (`--stall-after`, `--on-stall`)", f"its log and outputs silent (a GPU job: every GPU at 0 %) "
         f"for {h.stall_after_s} s unless given or `[jobs] stall_after_s` says (0: not watched): {h.on_stall} "
         "(a `stalled` event) unless `--on-stall stop`: SIGTERM with the grace, outputs synced, ends `stalled`, "
         "exit 125; `--retry stalled` relaunches"),
    ]  # fmt: skip
    return table(("what", "value"), rows)


def render_exit_codes(_facts: PolicyFacts) -> list[str]:
    """The exit statuses (eps.core.contract.EXIT_TABLE), as the agent guide states them."""
    from eps.core.contract import EXIT_TABLE, WAIT_CODES

    rows = [(f"`{code}`", name, when.replace("|", "/")) for code, name, when in EXIT_TABLE]
    rows += [(f"`{code}`", "the job's own (wait)", what) for code, what in WAIT_CODES]
    return table(("code", "name", "when"), rows)


def render_mcp_tools(_facts: PolicyFacts) -> list[str]:
    """The MCP server's tools (eps.core.contract.TOOLS), each with when it returns."""
    from eps.core.contract import TOOLS

    return table(("tool", "what it does, and when it returns"), [(f"`{name}`", what) for name, what in TOOLS])


def render_events(_facts: PolicyFacts) -> list[str]:
    """Every event a dispatch's log holds (eps.core.events), in the schema's order."""
    from eps.core.events import SAYS, Event

    return table(("event", "what it tells"), [(f"`{e.value}`", SAYS[e]) for e in Event])


RENDERERS: dict[str, Renderer] = {
    "events": render_events,
    "exit-codes": render_exit_codes,
    "mcp-tools": render_mcp_tools,
    "job-lifecycle": render_job_lifecycle,
    "healing": render_healing,
    "intents": render_intents,
    "lane-orders": render_lane_orders,
    "qos-ladder": render_qos_ladder,
    "cluster-rules": render_cluster_rules,
    "pending-reasons": render_pending_reasons,
}
#: Every block name a document may hold.
BLOCK_NAMES: frozenset[str] = frozenset({*RENDERERS, "lint-rules"})


def _renderers(rule_rows: Sequence[tuple[str, str, str]]) -> dict[str, Renderer]:
    return {**RENDERERS, "lint-rules": lambda _facts: render_lint_rules(rule_rows)}


def stale_blocks(
    doc: Doc, facts: PolicyFacts, rule_rows: Sequence[tuple[str, str, str]]
) -> list[tuple[int, str, list[str], list[str]]]:
    """(begin line index, name, current body, rendered body) of each known block whose text differs."""
    blocks, _ = doc.blocks()
    renderers = _renderers(rule_rows)
    out = []
    for b in blocks:
        render = renderers.get(b.name)
        if render is None:
            continue
        want = render(facts)
        have = list(doc.lines[b.body_slice])
        if have != want:
            out.append((b.begin, b.name, have, want))
    return out


def fix_file(path: Path, doc: Doc, facts: PolicyFacts, rule_rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """Rewrite every stale known block of ``doc`` (read from ``path``) in place; return the block names."""
    blocks, errors = doc.blocks()
    if errors:
        return []
    renderers = _renderers(rule_rows)
    lines = list(doc.lines)
    changed = []
    for b in reversed(blocks):
        render = renderers.get(b.name)
        if render is None:
            continue
        want = render(facts)
        if lines[b.body_slice] != want:
            lines[b.body_slice] = want
            changed.append(b.name)
    if changed:
        path.write_text("\n".join(lines), encoding="utf-8")
    return sorted(changed)
