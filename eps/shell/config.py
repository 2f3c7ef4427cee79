"""Settings: the embedded tables, overridden by the TOML config file, overridden by
the environment.  The result is one :class:`Settings`; the core gets its
``Policy`` and never reads files or the environment itself.

Config file: ``$EPS_CONFIG`` or ``$XDG_CONFIG_HOME/eps/config.toml``
(``~/.config/eps/config.toml``).  Secrets never live there: ``RUNPOD_API_KEY``
and GCP Application Default Credentials come from the environment and the
providers' standard files.

Environment overrides (per SLURM cluster NAME, upper-cased, ``-`` as ``_``):
``EPS_<NAME>_QUEUE_WAIT_SECONDS`` (rung 1 park cap; for fellows
``EPS_FELLOWS_QUEUE_WAIT_SECONDS``, default 600) and
``EPS_<NAME>_NEXT_QUEUE_WAIT_SECONDS`` (rungs 2+, default 300).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

from eps.core.model import ClusterConfig, Policy, evolve
from eps.core.tables import DEFAULT_POLICY, park_cap_env


class ConfigError(ValueError):
    """A config file, snapshot, grants file or environment value is malformed.  One line."""


class ClusterAccess(NamedTuple):
    """How the shell reaches a SLURM cluster: a command prefix (``["ssh", "login"]``) and the user."""

    name: str
    login: tuple[str, ...] = ()
    user: str | None = None


class GcpSettings(NamedTuple):
    project: str | None = None
    image: str = "projects/debian-cloud/global/images/family/debian-12"
    endpoint: str | None = None  # tests: a local server; production: the Google default
    service_account: str | None = None
    poll_interval_s: float = 2.0  # zone-operation polling


class RunpodSettings(NamedTuple):
    base_url: str = "https://api.runpod.io"  # REST v2 (paths under /v2/)
    image: str = "runpod/base:0.6.2-cpu"
    gpu_image: str = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
    data_centers: tuple[str, ...] = ()
    concurrency: int = 32
    poll_interval_s: float = 2.0  # GET /v2/pods/{id} until RUNNING


class Settings(NamedTuple):
    policy: Policy
    access: tuple[ClusterAccess, ...] = ()
    gcp: GcpSettings = GcpSettings()
    runpod: RunpodSettings = RunpodSettings()
    state_dir: str = "."
    config_path: str | None = None

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


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number of seconds") from None
    if value < 0:
        raise ConfigError(f"{name}={raw!r} must not be negative")
    return value


def _apply_env(cluster: ClusterConfig, env: Mapping[str, str]) -> ClusterConfig:
    first_name, next_name = park_cap_env(cluster.name)
    first = _env_int(env, first_name)
    nxt = _env_int(env, next_name)
    if first is not None:
        cluster = evolve(cluster, first_park_cap_s=first)
    if nxt is not None:
        cluster = evolve(cluster, next_park_cap_s=nxt)
    return cluster


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Defaults <- config file (if present) <- environment.  Raises ConfigError (one line)."""
    env = os.environ if env is None else env
    path = config_path(env)
    policy = DEFAULT_POLICY
    settings = Settings(policy=policy, state_dir=state_dir(env))
    if os.path.isfile(path):
        import tomllib

        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        from eps.shell.inputs import settings_from_config  # cattrs only when a file exists

        settings = settings_from_config(data, settings, source=path)
        settings = evolve(settings, config_path=path)
    elif env.get("EPS_CONFIG"):
        raise ConfigError(f"EPS_CONFIG={env['EPS_CONFIG']}: no such file")
    clusters = tuple(_apply_env(c, env) for c in settings.policy.clusters)
    return evolve(settings, policy=evolve(settings.policy, clusters=clusters))
