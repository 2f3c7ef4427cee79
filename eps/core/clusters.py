"""A SLURM cluster as the tables describe it: its ladder, park caps, partitions and account
per tier, and the cluster's own rules that every render follows (memory and CPUs per GPU,
the environment in the script body, the user in job names, preemptible tiers, the pace of
submissions, and what a robot login lets eps run).  Re-exported by :mod:`eps.core.model`;
split from it to keep each module small.

No ``from __future__ import annotations`` here: the shell's cattrs converter structures by
the fields' annotations (see :mod:`eps.core.model`).
"""

from collections.abc import Sequence

from eps.core.records import NamedTuple

#: The only commands eps runs through a robot login (``[[clusters]] access = "robot"``): its
#: key's forced command allows these and refuses everything else.  Source: the original
#: project's DRAC clusters (nibi, fir), whose automation keys run sbatch, scancel, squeue, scp
#: and rsync only (SPEC.md, "Robot-key clusters"; the Alliance's "Automation in the context of
#: multifactor authentication" page: a ``restrict,command=...`` key, no pty).  The one list:
#: the SLURM client and the job-file transport both refuse anything else before it is run.
ROBOT_COMMANDS: tuple[str, ...] = ("sbatch", "scancel", "squeue", "scp", "rsync")


def robot_refusal(argv: Sequence[str], cluster: str) -> str | None:
    """Why a robot login may not run ``argv`` (its first word is not one of
    :data:`ROBOT_COMMANDS`), one line; ``None`` when it may."""
    command = argv[0] if argv else ""
    if command in ROBOT_COMMANDS:
        return None
    allowed = ", ".join(ROBOT_COMMANDS)
    return f"{cluster} is a robot login ({allowed} only): eps never runs {command or 'an empty command'!r} there"


class ClusterConfig(NamedTuple):
    """A SLURM lane.  ``qos_ladder`` empty means the cluster has no ladder: one
    rung under the account's default QoS (and renders that never name a QoS)."""

    name: str
    partition: str | None = None
    account: str | None = None
    qos_ladder: tuple[str, ...] = ()
    dev_qos: str | None = None
    dev_qos_for_debug: bool = False
    first_park_cap_s: int = 600
    next_park_cap_s: int = 300
    advance_on_self_cap: bool = False
    gpus_per_node: int = 8
    gpu_model: str = "H200"
    max_nodes: int = 1
    #: A ladder tier's own partition / account, ``(qos, value)`` pairs (``low-eur`` on
    #: ``general,overflow``); every other tier takes the cluster's.
    tier_partitions: tuple[tuple[str, str], ...] = ()
    tier_accounts: tuple[tuple[str, str], ...] = ()
    #: ``--mem`` of a job: this many GB per GPU (one GPU's worth for a CPU-only job), at most
    #: ``mem_max_gb``; ``None``: no ``--mem`` (the cluster's default).  ``mem_max_per_gpu_gb``
    #: is the cluster's own ceiling per GPU: the config may not ask for more.
    mem_per_gpu_gb: int | None = None
    mem_max_gb: int | None = None
    mem_max_per_gpu_gb: int | None = None
    #: ``--cpus-per-task``: this many per GPU (one GPU's worth for a CPU-only job), at most
    #: ``cpus_max``; ``None``: no ``--cpus-per-task``.
    cpus_per_gpu: int | None = None
    cpus_max: int | None = None
    #: Exported in the batch script's body (never ``--export``): every job, and multi-GPU
    #: jobs besides (NCCL).  ``{user}`` in a value is the cluster user.
    job_env: tuple[tuple[str, str], ...] = ()
    multi_gpu_env: tuple[tuple[str, str], ...] = ()
    #: The job name carries the cluster user (``eps-<dispatch>-<user>``), for the
    #: cluster's own people to see whose it is.
    user_in_job_name: bool = False
    #: Tiers a higher tier may preempt (the tables' facts; ``sacctmgr`` grants say it live).
    preemptible: tuple[str, ...] = ()
    #: ``full``: eps may run any SLURM command and a shell through the login; ``robot``: the
    #: login's key allows only sbatch, scancel, squeue and scp/rsync.
    access: str = "full"
    #: At least this many seconds between two sbatch calls to this cluster from this host.
    submit_gap_s: float = 0.0
    #: The batch script traps SIGTERM/SIGINT/SIGQUIT and passes them to its whole process
    #: group, then waits (orphaned workers have bricked nodes).
    cleanup_trap: bool = False

    def resources(self, gpus: int) -> "tuple[int | None, int | None]":
        """``(--mem in GB, --cpus-per-task)`` of a job of ``gpus`` GPUs here: the per-GPU
        figures times the GPUs (one GPU's worth for a CPU-only job), each within its cap;
        ``None`` where the row sets none.  Never 0 (``--mem=0`` takes a whole node's memory)."""
        n = max(1, gpus)
        mem = cpus = None
        if self.mem_per_gpu_gb is not None:
            mem = self.mem_per_gpu_gb * n
            if self.mem_max_gb is not None:
                mem = min(mem, self.mem_max_gb)
            mem = max(1, mem)
        if self.cpus_per_gpu is not None:
            cpus = self.cpus_per_gpu * n
            if self.cpus_max is not None:
                cpus = min(cpus, self.cpus_max)
            cpus = max(1, cpus)
        return mem, cpus

    @property
    def robot(self) -> bool:
        """Reached through a robot login: eps runs only :data:`ROBOT_COMMANDS` there."""
        return self.access == "robot"

    def partition_for(self, qos: str | None) -> str | None:
        """The partition a job under ``qos`` is submitted to."""
        return dict(self.tier_partitions).get(qos or "", self.partition)

    def account_for(self, qos: str | None) -> str | None:
        """The account a job under ``qos`` is charged to."""
        return dict(self.tier_accounts).get(qos or "", self.account)

    @property
    def later_park_cap_s(self) -> int:
        """The park cap of rungs 2+ (P8): ``next_park_cap_s``, but never more than rung 1's
        cap, so a later rung never waits longer than the first (the smaller of the two settings)."""
        return min(self.first_park_cap_s, self.next_park_cap_s)
