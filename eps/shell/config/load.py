"""Loading the settings: the embedded tables, overridden by the TOML config file,
overridden by the environment (:func:`load_settings`).

Config file: ``$EPS_CONFIG`` or ``$XDG_CONFIG_HOME/eps/config.toml``
(``~/.config/eps/config.toml``), structured strictly by :mod:`eps.shell.config.convert`.

Environment overrides (per SLURM cluster NAME, upper-cased, ``-`` as ``_``):
``EPS_<NAME>_QUEUE_WAIT_SECONDS`` (rung 1 park cap; for fellows
``EPS_FELLOWS_QUEUE_WAIT_SECONDS``, default 600) and
``EPS_<NAME>_NEXT_QUEUE_WAIT_SECONDS`` (rungs 2+, default 300); ``EPS_STATE_URL`` (the
ledger's PostgreSQL database, over ``[state] url``).  Their values are
durations read by the one parser (``600``, ``10m``, ``1h30m``, ``00:10:00``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from eps.core.durations import parse_duration
from eps.core.model import ClusterConfig, evolve
from eps.core.tables import DEFAULT_POLICY, park_cap_env
from eps.shell.config.settings import ConfigError, Settings, config_path, state_dir


def _env_seconds(env: Mapping[str, str], name: str) -> int | None:
    """A duration from the environment, read like ``--duration`` (``600``, ``10m``, ``1h30m``, ``00:10:00``)."""
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r}: {exc}") from None


def _apply_env(cluster: ClusterConfig, env: Mapping[str, str]) -> ClusterConfig:
    first_name, next_name = park_cap_env(cluster.name)
    first = _env_seconds(env, first_name)
    nxt = _env_seconds(env, next_name)
    if first is not None:
        cluster = evolve(cluster, first_park_cap_s=first)
    if nxt is not None:
        cluster = evolve(cluster, next_park_cap_s=nxt)
    return cluster


#: What besides the config file decides the settings: every ``EPS_`` variable, and where the
#: config file and home are (never a secret: keys come from the providers' own variables and files).
SETTINGS_ENV = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "USER", "LOGNAME")


def settings_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of ``env`` the settings are made of (:data:`SETTINGS_ENV`, ``EPS_*``)."""
    return {k: v for k, v in env.items() if k.startswith("EPS_") or k in SETTINGS_ENV}


def config_text(env: Mapping[str, str]) -> bytes | None:
    """The config file's bytes now (``None``: there is none); what a dispatch is handed over with."""
    path = config_path(env)
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def _team_env(settings: Settings, env: Mapping[str, str]) -> Settings:
    from eps.shell.config.state import host_name

    host, lease = settings.state_host, settings.state_lease_s
    if env.get("EPS_STATE_HOST"):
        host = host_name(env["EPS_STATE_HOST"], "EPS_STATE_HOST")
    if env.get("EPS_STATE_LEASE"):
        try:
            lease = float(parse_duration(env["EPS_STATE_LEASE"]))
        except ValueError as exc:
            raise ConfigError(f"EPS_STATE_LEASE: {exc}") from None
        if lease <= 0:
            raise ConfigError("EPS_STATE_LEASE: must be positive")
    return evolve(settings, state_host=host, state_lease_s=lease)


def load_settings(env: Mapping[str, str] | None = None, *, text: bytes | None = None) -> Settings:
    """Defaults <- config file (if present) <- environment.  Raises ConfigError (one line).

    ``text``: the config file's content as it was when a dispatch was handed over (the
    settings it is walked with, whatever the file says now); ``None``: read the file."""
    env = os.environ if env is None else env
    path = config_path(env)
    settings = Settings(policy=DEFAULT_POLICY, state_dir=state_dir(env))
    if text is not None or os.path.isfile(path):
        import tomllib

        try:
            if text is None:
                with open(path, "rb") as fh:
                    text = fh.read()
            data = tomllib.loads(text.decode("utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        from eps.shell.config.convert import settings_from_config  # cattrs only when a file exists

        settings = settings_from_config(data, settings, source=path)
        settings = evolve(settings, config_path=path)
    elif env.get("EPS_CONFIG"):
        raise ConfigError(f"EPS_CONFIG={env['EPS_CONFIG']}: no such file")
    if "EPS_STATE_URL" in env:  # over [state] url (empty: SQLite in the state directory)
        from eps.shell.config.state_url import checked_url

        settings = evolve(settings, state_url=checked_url(env["EPS_STATE_URL"], "EPS_STATE_URL: "))
    if env.get("EPS_STATE_HOST") or env.get("EPS_STATE_LEASE"):  # a team's host and lease (eps.shell.config.state)
        settings = _team_env(settings, env)
    clusters = tuple(_apply_env(c, env) for c in settings.policy.clusters)
    # [jobs] max_time_limit reaches plan() through the policy (the limit of a job of unknown length)
    policy = evolve(settings.policy, clusters=clusters, max_time_limit_s=settings.jobs.max_time_limit_s)
    return evolve(settings, policy=policy)
