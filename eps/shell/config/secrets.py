"""What a secret may look like, checked before it is used anywhere.

A credential travels in an HTTP header; a control character in it (a pasted newline)
would break the header and surface in error messages in an escaped form that plain
redaction misses.  Such a value is refused up front, naming only where it came from.
"""

from __future__ import annotations


def secret_problem(value: str) -> str | None:
    """Why ``value`` cannot be a credential, or ``None``."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "holds a control character (a pasted newline?)"
    if not value.isascii():
        return "holds a non-ASCII character"
    return None


#: The credentials eps itself reads from its environment (RunPod's key, the storage keys, GCP's
#: credentials file).  A command eps runs that does not need them gets an environment without
#: them: ``sbatch`` on a local login exports the whole environment of whoever runs it into the
#: job (the cluster's rule 1 forbids ``--export=``), so a job would see them, and so would
#: ``scontrol show job`` / the controller's saved job environment.
CREDENTIAL_ENV = (
    "RUNPOD_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
)


def without_credentials(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` less :data:`CREDENTIAL_ENV`."""
    return {k: v for k, v in environ.items() if k not in CREDENTIAL_ENV}
