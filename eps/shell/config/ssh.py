"""``[ssh]``: how eps's own ssh connections to the machines it makes are set up.

``key_exchange``: the key exchange algorithms eps offers, in order (ssh's
``KexAlgorithms``).  Unset, ssh's own default: on OpenSSH 9.0 and later a post-quantum
hybrid (``sntrup761x25519-sha512@openssh.com``; ``mlkem768x25519-sha256`` from 10.0),
which protects a recorded session against a future quantum computer.  On OpenSSH 9.0-9.8
that hybrid costs about 0.1 CPU-s per connection on this side (measured on a 2-core
machine: a 200-machine fan-out spends some 20 CPU-s in it); ``["curve25519-sha256"]``
trades that protection for speed.  eps makes one connection per machine (its master), so
this is paid once per machine.  Each name is checked against ``ssh -Q kex`` when the
config is read.  Login prefixes (``[[clusters]] login``) are the user's own ssh setup and
are not touched.
"""

import re

from attrs import frozen

from eps.shell.config.settings import ConfigError

_NAME = re.compile(r"[a-z0-9][a-z0-9@.+-]{0,99}")


@frozen
class SshDoc:
    """The ``[ssh]`` section as written (structured strictly by :mod:`eps.shell.config.convert`; real
    annotations, so cattrs needs no resolving)."""

    key_exchange: list[str] | None = None


def key_exchange(names: list[str] | None, source: str) -> str:
    """The ``KexAlgorithms`` value for ``[ssh] key_exchange`` (empty: ssh's default)."""
    where = "$.ssh.key_exchange"
    if names is None:
        return ""
    if not names:
        raise ConfigError(f"{source}: name at least one algorithm, or leave key_exchange out @ {where}")
    offered = _offered()
    for i, name in enumerate(names):
        if _NAME.fullmatch(name) is None:
            raise ConfigError(f"{source}: {name!r} is not an algorithm name @ {where}[{i}]")
        if name in names[:i]:
            raise ConfigError(f"{source}: {name} is named twice @ {where}[{i}]")
        if offered and name not in offered:
            raise ConfigError(f"{source}: this ssh has no key exchange {name} (see: ssh -Q kex) @ {where}[{i}]")
    return ",".join(names)


def _offered() -> frozenset[str]:
    """What this machine's ssh can do (``ssh -Q kex``); empty when it cannot be asked."""
    import subprocess  # only for a config that sets key_exchange

    try:
        done = subprocess.run(["ssh", "-Q", "kex"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(done.stdout.split()) if done.returncode == 0 else frozenset()
