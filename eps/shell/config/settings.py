"""The settings records: what the shell knows besides the policy tables.

One :class:`Settings` is built per command by :func:`eps.shell.config.load.load_settings`
(embedded tables <- the TOML config file <- the environment); the core gets its
``Policy`` and never reads files or the environment itself.  Secrets never live
here: ``RUNPOD_API_KEY`` and GCP Application Default Credentials come from the
environment and the providers' standard files.
"""

import os
from collections.abc import Mapping

from eps.core.model import Policy
from eps.core.records import NamedTuple
from eps.core.tables import DEFAULT_POLICY, HEALING, JOB_LIFECYCLE, Healing
from eps.shell.config.errors import ConfigError, duration_setting

__all__ = ["ConfigError", "duration_setting"]  # re-exported: where every caller has taken them from

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the plan path
if TYPE_CHECKING:
    from eps.shell.config.notify import NotifySettings
    from eps.shell.config.storage import StorageSettings


class ClusterAccess(NamedTuple):
    """How the shell reaches a SLURM cluster: a command prefix (``["ssh", "login"]``) and the
    user.  ``master``: the ControlPath of an ssh master connection the user opens (a login
    that asks for a second factor); then eps reaches the login only through it.  ``grants``:
    the path of a grants file that gives the cluster's QoS tiers (``[[clusters]] grants``)."""

    name: str
    login: tuple[str, ...] = ()
    user: str | None = None
    work_root: str | None = None  # where dispatch roots go, on the filesystem the nodes share
    master: str | None = None
    grants: str | None = None  # a grants file (the format of --grants): the QoS tiers, never sacctmgr

    @property
    def prefix(self) -> tuple[str, ...]:
        """The login prefix eps runs: with a ``master``, ssh never connects on its own and
        never prompts (``ControlMaster=no``, ``BatchMode=yes``)."""
        if not self.master or not self.login:
            return self.login
        only = ("-o", f"ControlPath={self.master}", "-o", "ControlMaster=no", "-o", "BatchMode=yes")
        return (self.login[0], *only, *self.login[1:])


class GcpSettings(NamedTuple):
    """The ``[gcp]`` section.  The defaults work in a default project: its ``default``
    VPC network (auto mode: a subnet per region, and a firewall rule that lets ssh in),
    an ephemeral external IP, a balanced persistent disk, no service account."""

    project: str | None = None
    image: str = "projects/debian-cloud/global/images/family/debian-12"  # CPU machines
    gpu_image: str | None = None  # GPU machines; None: the table's image per family (tables.GCP_GPU_IMAGES)
    endpoint: str | None = None  # tests: a local server; production: the Google default
    network: str = "global/networks/default"
    subnetwork: str | None = None  # None: the network's subnet in the VM's region (auto-mode networks)
    external_ip: bool = True  # an ephemeral public address (ssh, downloads without Cloud NAT)
    disk_type: str = "pd-balanced"
    service_account: str | None = None  # an email, or "default" (the project's Compute Engine account)
    scopes: tuple[str, ...] = ("https://www.googleapis.com/auth/cloud-platform",)  # with a service account
    tags: tuple[str, ...] = ()  # network tags (firewall rules select by them)
    flex_start_wait_s: int = 600  # how long a flex-start VM may wait (PENDING) for capacity: 0 or 90..7200
    ssh_user: str = "eps"  # the login eps makes on its VMs (metadata ssh-keys); sudo through the guest agent
    work_root: str = "eps-runs"  # dispatch roots on the VM; relative: under ssh_user's home
    poll_interval_s: float = 2.0  # zone-operation polling


class RunpodSettings(NamedTuple):
    base_url: str = "https://api.runpod.io"  # REST v2 (paths under /v2/)
    image: str = "runpod/base:0.6.2-cpu"
    gpu_image: str = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
    data_centers: tuple[str, ...] = ()
    concurrency: int = 32  # HTTP requests in flight at once
    poll_interval_s: float = 2.0  # GET /v2/pods/{id} until RUNNING
    work_root: str = "eps-runs"  # dispatch roots in the pod; relative: under root's home


class JobsSettings(NamedTuple):
    """A job's life after it started."""

    supervise: str = "detached"  # "detached": a supervisor process owns each dispatch; "inline": this process walks it
    supervisor_idle_s: float = 30.0  # a supervisor with nothing to do leaves after this long
    linger_s: int = JOB_LIFECYCLE.linger_s  # a finished job's machine waits this long for the pull
    wait_poll_s: float = 2.0  # how often `eps wait` looks
    #: the time limit of a job of unknown length on a spot/on-demand VM or a pod (`max_time_limit`)
    max_time_limit_s: int = DEFAULT_POLICY.max_time_limit_s
    #: a running job's $EPS_OUTPUT_DIR is pulled this often unless the job says (`--sync-every`); 0: never
    sync_every_s: int = HEALING.sync_every_s
    #: a machine the provider says runs, unreachable over ssh this long while its job runs, is released
    wedge_s: int = HEALING.wedge_s
    #: a dispatch waiting for capacity (`--retry no-capacity`) tries again after this long, doubling each time
    capacity_wait_s: int = HEALING.capacity_wait_first_s
    #: a job whose log and outputs (a GPU job: GPUs) are silent this long is stalled (`--stall-after`); 0: off
    stall_after_s: int = HEALING.stall_after_s
    #: what a stall does unless the job says (`--on-stall`): "notify" or "stop"
    on_stall: str = HEALING.on_stall

    def healing(self) -> Healing:
        """The healing table with this config's numbers in it (what ``policy_of``, ``wedged``
        and ``after_no_capacity`` read)."""
        return HEALING._replace(sync_every_s=self.sync_every_s, wedge_s=self.wedge_s,
                                stall_after_s=self.stall_after_s, on_stall=self.on_stall,
                                capacity_wait_first_s=self.capacity_wait_s,
                                capacity_wait_max_s=max(HEALING.capacity_wait_max_s, self.capacity_wait_s))  # fmt: skip


class Settings(NamedTuple):
    policy: Policy
    access: tuple[ClusterAccess, ...] = ()
    gcp: GcpSettings = GcpSettings()
    runpod: RunpodSettings = RunpodSettings()
    state_dir: str = "."
    config_path: str | None = None
    fanout_concurrency: int = 32  # --count N: copies walked at once, on every lane
    jobs: JobsSettings = JobsSettings()
    notes: tuple[str, ...] = ()  # what the config says that eps no longer does (shown by execute)
    ssh_kex: str = ""  # [ssh] key_exchange: KexAlgorithms for eps's own machines (empty: ssh's default)
    storage: "StorageSettings | None" = None  # [storage] (None: no section; no storage unless a job gives one)
    notify: "NotifySettings | None" = None  # [notify] (None: no section)
    state_url: str | None = None  # [state] url / EPS_STATE_URL: the ledger in PostgreSQL (None: SQLite in state_dir)
    state_host: str | None = None  # [state] host / EPS_STATE_HOST: this host's name in the team (None: hostname.TAG)
    state_lease_s: float = 60.0  # [state] lease / EPS_STATE_LEASE: a host's hold on a dispatch without a renewal

    def cluster_access(self, name: str) -> ClusterAccess:
        for a in self.access:
            if a.name == name:
                return a
        return ClusterAccess(name)


# Plain os.path strings: pathlib and tomllib cost milliseconds that `eps plan` does not spend.


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def config_path(env: Mapping[str, str]) -> str:
    if env.get("EPS_CONFIG"):
        return env["EPS_CONFIG"]
    base = env.get("XDG_CONFIG_HOME") or os.path.join(_home(env), ".config")
    return os.path.join(base, "eps", "config.toml")


def state_dir(env: Mapping[str, str]) -> str:
    if env.get("EPS_STATE_DIR"):
        return env["EPS_STATE_DIR"]
    base = env.get("XDG_STATE_HOME") or os.path.join(_home(env), ".local", "state")
    return os.path.join(base, "eps")
