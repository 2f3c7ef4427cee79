"""Whether each lane can be used on this machine, answered from the settings, the
environment and a few file lookups: no adapter, provider SDK or network call.

``eps plan`` marks the rungs of lanes that are down here (plan equals execute),
``eps execute`` skips them, ``eps status`` does not ask them, and ``eps check`` starts
from the same answers before it asks the lanes that are set up whether they answer
(:mod:`eps.shell.cli.check`).  Each answer is a :class:`~eps.core.model.LaneDown` with
a stable code (not configured, no credentials, down), a reason in words and the exact
step that fixes it, or ``None`` when the lane is set up.

Kept light (``eps plan`` imports it): os and the settings records only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from eps.core.model import DownCode, LaneDown, LaneKind
from eps.shell.config.secrets import secret_problem
from eps.shell.config.settings import ClusterAccess, Settings

#: Where Linux tells it runs on Compute Engine (google-auth reads the same file to decide
#: whether to ask the metadata server for credentials).
GCE_PRODUCT_FILE = "/sys/class/dmi/id/product_name"


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def gcp_credentials(settings: Settings, env: Mapping[str, str]) -> tuple[str | None, str]:
    """Where GCP credentials would come from (``None``: nowhere), and in words.

    The places Application Default Credentials are looked for, in google-auth's order:
    ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's ADC file, the metadata server on
    Compute Engine.  A plain-http endpoint is a local test server: anonymous."""
    endpoint = settings.gcp.endpoint or ""
    if endpoint.startswith("http://"):
        return "anonymous", f"anonymous (local test endpoint {endpoint})"
    named = env.get("GOOGLE_APPLICATION_CREDENTIALS", "").strip()
    if named:
        if os.path.isfile(named):
            return named, f"GOOGLE_APPLICATION_CREDENTIALS ({named})"
        return None, f"GOOGLE_APPLICATION_CREDENTIALS names {named}, which does not exist"
    gcloud = env.get("CLOUDSDK_CONFIG") or os.path.join(_home(env), ".config", "gcloud")
    adc = os.path.join(gcloud, "application_default_credentials.json")
    if os.path.isfile(adc):
        return adc, f"gcloud application-default credentials ({adc})"
    try:
        with open(GCE_PRODUCT_FILE, encoding="utf-8") as fh:
            if "Google" in fh.read(200):
                return "metadata", "the Compute Engine metadata server (this machine is a GCE VM)"
    except OSError:
        pass
    return None, "no Application Default Credentials found"


def runpod_key_source(env: Mapping[str, str], given: str | None = None) -> tuple[str | None, str | None]:
    """Where the RunPod key comes from (``None``: nowhere) and what is wrong with it, if anything."""
    key = given or env.get("RUNPOD_API_KEY", "").strip()
    if key:
        problem = secret_problem(key)
        return "RUNPOD_API_KEY", None if problem is None else f"the RunPod API key in RUNPOD_API_KEY {problem}"
    path = os.path.join(_home(env), ".runpod", "config.toml")
    if os.path.exists(path):
        return path, None
    return None, None


def fix_config(settings: Settings, what: str) -> str:
    where = settings.config_path or "~/.config/eps/config.toml (or $EPS_CONFIG)"
    return f"add {what} to {where}"


def vm_down(settings: Settings, env: Mapping[str, str], name: str, **_: object) -> LaneDown | None:
    return None


def _on_path(name: str, path: str) -> bool:
    """An executable ``name`` in a directory of ``path`` (``shutil.which`` without importing
    shutil, and with it bz2 and lzma, on the plan path)."""
    for d in path.split(os.pathsep):
        f = os.path.join(d or os.curdir, name)
        if os.path.isfile(f) and os.access(f, os.X_OK):
            return True
    return False


def _master_down(access: ClusterAccess, master: str) -> LaneDown | None:
    """A login reached only through the user's own ssh master: down (``no_master``) unless
    the master answers ``ssh -O check`` (a local socket, no connection is made).  No socket
    at all: not even that is run."""
    host = next((w for w in access.login[1:] if not w.startswith("-")), "LOGIN-HOST")
    opening = f"ssh -M -S {master} -o ControlPersist=yes -fN {host}"
    why = (f"{access.name} is reached only through your ssh master ({master}), which is not open: "
           f"eps opens no connection of its own to a login that asks for a second factor")  # fmt: skip
    if not os.path.exists(master):
        return LaneDown(access.name, why, DownCode.NO_MASTER, f"open it: {opening}")
    import subprocess

    check = [access.login[0], "-S", master, "-O", "check", host]
    try:
        done = subprocess.run(check, capture_output=True, timeout=5, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return LaneDown(access.name, why, DownCode.NO_MASTER, f"open it again: {opening}")
    ok = done.returncode == 0
    return None if ok else LaneDown(access.name, why, DownCode.NO_MASTER, f"open it again: {opening}")


def slurm_down(
    settings: Settings, env: Mapping[str, str], name: str, *, runner_given: bool = False, **_: object
) -> LaneDown | None:
    access = settings.cluster_access(name)
    if access.master and not runner_given:
        return _master_down(access, access.master)
    if access.login or runner_given:
        return None
    if not _on_path("sbatch", env.get("PATH", os.defpath)):
        fix = fix_config(settings, f'[[clusters]] name = "{name}" with login = ["ssh", "LOGIN-HOST"]')
        return LaneDown(
            name,
            f"no SLURM client here (sbatch) and no login prefix for {name}",
            DownCode.NOT_CONFIGURED,
            f"{fix}, or run eps where sbatch is installed",
        )
    return None


def gcp_down(settings: Settings, env: Mapping[str, str], name: str, **_: object) -> LaneDown | None:
    if not settings.gcp.project:
        return LaneDown(
            name,
            "no GCP project configured",
            DownCode.NOT_CONFIGURED,
            fix_config(settings, '[gcp] project = "YOUR-PROJECT"'),
        )
    found, words = gcp_credentials(settings, env)
    if found is None:
        return LaneDown(
            name,
            f"no GCP credentials: {words}",
            DownCode.NO_CREDENTIALS,
            "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a key file",
        )
    return None


def runpod_down(
    settings: Settings, env: Mapping[str, str], name: str, *, runpod_key: str | None = None, **_: object
) -> LaneDown | None:
    source, problem = runpod_key_source(env, runpod_key)
    fix = "export RUNPOD_API_KEY=KEY (RunPod console: Settings, API Keys), or `runpodctl config --apiKey KEY`"
    if problem is not None:
        return LaneDown(name, problem, DownCode.NO_CREDENTIALS, fix)
    if source is None:
        return LaneDown(name, "no RunPod API key", DownCode.NO_CREDENTIALS, fix)
    return None


#: Why a lane of each kind cannot be used here.
DOWN_CHECKS: Mapping[LaneKind, Callable[..., LaneDown | None]] = {
    LaneKind.VM: vm_down,
    LaneKind.SLURM: slurm_down,
    LaneKind.GCP: gcp_down,
    LaneKind.RUNPOD: runpod_down,
}


def lane_names(settings: Settings) -> tuple[str, ...]:
    """Every lane of the policy: the VM, each cluster, gcp, runpod."""
    p = settings.policy
    return (p.trivial_lane, *(c.name for c in p.clusters), "gcp", "runpod")


def down_here(
    settings: Settings,
    env: Mapping[str, str],
    names: tuple[str, ...] | None = None,
    *,
    runpod_key: str | None = None,
    runner_given: bool = False,
) -> tuple[LaneDown, ...]:
    """The lanes (of ``names``, default every lane) that cannot be used here, with why and the fix."""
    out = []
    for name in lane_names(settings) if names is None else names:
        kind = settings.policy.lane_kind(name)
        if kind is None:
            continue
        d = DOWN_CHECKS[kind](settings, env, name, runpod_key=runpod_key, runner_given=runner_given)
        if d is not None:
            out.append(d)
    return tuple(out)
