"""``[storage]``: where a job's outputs, checkpoints and log go besides its machine.

``url`` (``s3://BUCKET/PREFIX`` or ``gs://BUCKET/PREFIX``): the default location; a job
overrides it with ``--storage URL`` (``--storage none``: not for this job).  Unset and not
given, nothing changes: outputs come back to the state directory as before.

For ``s3://``: ``endpoint`` (an S3-compatible server: GCS's interoperability endpoint, R2,
B2, MinIO; unset: AWS), ``region``, ``provider`` (rclone's name for the service: ``AWS``,
``GCS``, ``Cloudflare``, ``Minio``, ``Other``...), ``profile`` (of the shared credentials
file).  The keys come from the provider's standard places, never from this file:
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), else the
shared credentials file (``AWS_SHARED_CREDENTIALS_FILE`` or ``~/.aws/credentials``,
profile ``AWS_PROFILE`` or ``profile`` or ``default``).

For ``gs://``: a service account key file (``GOOGLE_APPLICATION_CREDENTIALS``), or, with
``machine_credentials = "service-account"``, the GCP VM's own service account (``[gcp]
service_account``) with the storage scope ``scope`` (``read_write``, ``full_control``),
and no key leaves this machine at all.  ``gs_endpoint``: the JSON API's base URL when it is
not Google's (a private endpoint, ``https://storage-NAME.p.googleapis.com/storage/v1/``, or
an emulator); unset: Google's.
"""

import re

from attrs import frozen

from eps.core.records import NamedTuple
from eps.shell.config.errors import ConfigError

#: rclone's s3 providers eps names (its ``provider`` option).
PROVIDERS = ("AWS", "GCS", "Cloudflare", "Minio", "Ceph", "Wasabi", "DigitalOcean", "Other")
SCOPES = {"read_write": "devstorage.read_write", "full_control": "devstorage.full_control"}
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_PROFILE = re.compile(r"[A-Za-z0-9_.+-]{1,64}")


@frozen
class StorageDoc:
    """The ``[storage]`` section as written (structured strictly by :mod:`eps.shell.config.convert`)."""

    url: str | None = None
    endpoint: str | None = None
    region: str | None = None
    provider: str | None = None
    profile: str | None = None
    machine_credentials: str | None = None
    scope: str | None = None
    gs_endpoint: str | None = None


class StorageSettings(NamedTuple):
    url: str | None = None  # the default location (None: off unless a job gives --storage)
    endpoint: str | None = None  # s3: an S3-compatible server (None: AWS)
    region: str | None = None
    provider: str = "Other"
    profile: str | None = None  # s3: the shared credentials file's profile (None: AWS_PROFILE, else default)
    machine_credentials: str = "file"  # "file": a 0600 file on the machine; "service-account": the GCP VM's own
    scope: str = "read_write"  # with "service-account": the storage scope the VM gets
    gs_endpoint: str | None = None  # gs: the JSON API's base URL (None: Google's)


def storage_settings(base: StorageSettings, doc: StorageDoc, source: str) -> StorageSettings:
    """``[storage]`` over ``base``; one :class:`ConfigError` line for the first thing wrong."""
    from eps.core.storage import StorageError, parse_url

    where = "$.storage"
    if doc.url is not None:
        try:
            parse_url(doc.url)
        except StorageError as exc:
            raise ConfigError(f"{source}: {exc} @ {where}.url") from None
    for name, value in (("endpoint", doc.endpoint), ("gs_endpoint", doc.gs_endpoint)):
        if value is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise ConfigError(f"{source}: {name} must be an http(s) URL @ {where}.{name} (got {value!r})")
    if doc.region is not None and not _REGION.fullmatch(doc.region):
        raise ConfigError(f"{source}: {doc.region!r} is not a region name @ {where}.region")
    if doc.provider is not None and doc.provider not in PROVIDERS:
        raise ConfigError(f"{source}: provider is one of {', '.join(PROVIDERS)} @ {where}.provider")
    if doc.profile is not None and not _PROFILE.fullmatch(doc.profile):
        raise ConfigError(f"{source}: {doc.profile!r} is not a profile name @ {where}.profile")
    if doc.machine_credentials not in (None, "file", "service-account"):
        raise ConfigError(f'{source}: machine_credentials is "file" or "service-account" @ {where}.machine_credentials')
    if doc.scope is not None and doc.scope not in SCOPES:
        raise ConfigError(f"{source}: scope is one of {', '.join(SCOPES)} @ {where}.scope")
    changes = {k: v for k, v in (("url", doc.url), ("endpoint", doc.endpoint), ("region", doc.region),
                                 ("provider", doc.provider), ("profile", doc.profile),
                                 ("machine_credentials", doc.machine_credentials), ("scope", doc.scope),
                                 ("gs_endpoint", doc.gs_endpoint))
               if v is not None}  # fmt: skip
    return base._replace(**changes)
