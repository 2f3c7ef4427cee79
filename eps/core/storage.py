"""Object storage for a job's outputs, checkpoints and log (pure): where they go, and the
bash lines by which the job's own machine puts them there.

A storage location is a URL, ``s3://BUCKET/PREFIX`` (any S3-compatible endpoint: AWS, GCS
through its S3 interoperability, R2, B2, MinIO) or ``gs://BUCKET/PREFIX`` (GCS itself).
Under it, each task of a dispatch has its own place (:func:`place`)::

    <prefix>/<dispatch>/<task>/out/...        $EPS_OUTPUT_DIR, mirrored (never deleted from)
    <prefix>/<dispatch>/<task>/job.log        the log of the first run
    <prefix>/<dispatch>/<task>/job.r<N>.log   the log of relaunch N

The machine writes there itself with rclone, never through the shared VM: before the job
(``--input`` prefixes into its workdir; a relaunch's outputs back into ``out/``), while it
runs (every ``sync_every``: ``out/`` and the log), and at its end, after everything of the
job has stopped (what it wrote in its SIGTERM grace included), before the wrapper writes
``exit-code``: the end is seen only once the last upload is done, and the ``stored`` record
(0: confirmed) says whether it succeeded.  rclone reads its remotes from a file of mode 0600
in the dispatch root (:func:`rclone_config`): no credential is ever in an argv, the job's
environment or a log; and the wrapper removes that file as soon as its last transfer is done
(the last upload, confirmed or given up; with inputs only, once they are copied), so no
credential rests on the machine (a cluster's shared filesystem above all).

Inputs are ``URL[:DEST]``: a prefix (or one object) copied into ``work/DEST`` (``DEST``
relative, default the prefix's last name) before the setup line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from eps.core.sbatch import quote_arg

#: What the job's machine calls itself to the storage server (its log tells it from eps's own reads).
MACHINE_AGENT = "eps-machine"

#: The schemes eps stores to, as rclone remotes of the same name in the job's rclone.conf.
SCHEMES = ("s3", "gs")
#: A bucket name both S3 and GCS accept (3-63 of a-z, 0-9, ``.``, ``-``, ``_`` for GCS).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
#: The rclone config file in the dispatch root (mode 0600; a secret's only home on the machine).
RCLONE_CONF = "rclone.conf"
#: Where eps puts its own rclone on a machine that has none: ``<work root>/.eps-bin/rclone``.
RCLONE_BIN = ".eps-bin/rclone"
#: The flags of every transfer the machine makes: links are never followed or stored (a link
#: planted in the outputs is left out, said once), a log still being written is copied as it is,
#: a transfer that fails is retried by rclone itself before the wrapper says so; 16 files at once
#: (rclone's default, 4, leaves outputs of many small files waiting on one request after another).
RCLONE_FLAGS = ("--skip-links", "--local-no-check-updated", "--retries", "3", "--low-level-retries", "5",
                "--transfers", "16", "--checkers", "16", "--stats", "0", "--log-level", "NOTICE")  # fmt: skip
#: The job's own downloads from the Hugging Face Hub, on every lane: the Hub client's transfer
#: settings (huggingface_hub's documented variables, exported by the wrapper beside HF_HOME, each a
#: default: a cluster's batch script or the job's own --env wins).  hf_xet, the Hub's transfer
#: backend, at full speed (a cluster job: within its own CPUs); a download that may
#: wait 60 s for the Hub, not 10.  Never HF_HUB_ENABLE_HF_TRANSFER: an older client given it without
#: the hf_transfer package fails every download, and huggingface_hub 1.x ignores it.
HF_TRANSFER_LINES = (
    "  # the Hugging Face Hub client's transfers: hf_xet at full speed, a 60 s download timeout",
    '  export HF_XET_HIGH_PERFORMANCE="${HF_XET_HIGH_PERFORMANCE:-1}"',
    '  export HF_HUB_DOWNLOAD_TIMEOUT="${HF_HUB_DOWNLOAD_TIMEOUT:-60}"',
)


class StorageError(ValueError):
    """A storage URL or an input that cannot be used.  One line, naming what."""


class StorageUrl(NamedTuple):
    """``scheme://bucket/prefix`` (prefix without a leading or trailing ``/``; may be empty)."""

    scheme: str
    bucket: str
    prefix: str = ""

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")

    def remote(self, *parts: str) -> str:
        """The rclone path of ``parts`` under this URL (``s3:bucket/prefix/a/b``)."""
        tail = "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))
        return f"{self.scheme}:{self.bucket}" + (f"/{tail}" if tail else "")

    def url(self, *parts: str) -> str:
        tail = "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))
        return f"{self.scheme}://{self.bucket}" + (f"/{tail}" if tail else "")


def parse_url(text: str, what: str = "storage") -> StorageUrl:
    """``s3://BUCKET[/PREFIX]`` or ``gs://BUCKET[/PREFIX]``.  :class:`StorageError` otherwise."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in SCHEMES:
        raise StorageError(f"{what} {text!r}: give s3://BUCKET/PREFIX or gs://BUCKET/PREFIX")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise StorageError(f"{what} {text!r}: {bucket!r} is not a bucket name (3-63 of a-z, 0-9, '.', '-', '_')")
    prefix = prefix.strip("/")
    parts = prefix.split("/") if prefix else []
    if any(p in ("", ".", "..") for p in parts):
        raise StorageError(f"{what} {text!r}: the prefix may not hold empty, '.' or '..' parts")
    if any(ord(c) < 0x20 or c in "\x7f\\" for c in prefix):
        raise StorageError(f"{what} {text!r}: the prefix may not hold control characters or backslashes")
    return StorageUrl(scheme, bucket, prefix)


class Input(NamedTuple):
    """``--input URL[:DEST]``: what is copied, and where under ``work/`` it goes."""

    source: StorageUrl
    dest: str

    def __str__(self) -> str:
        return f"{self.source}:{self.dest}"


def parse_input(text: str) -> Input:
    """``URL[:DEST]``: ``DEST`` relative, within the workdir (default: the prefix's last name)."""
    scheme, sep, rest = text.partition("://")
    url_text, dest = (f"{scheme}{sep}{rest}", "")
    if sep and ":" in rest:
        head, _, dest = rest.rpartition(":")
        url_text = f"{scheme}{sep}{head}"
    source = parse_url(url_text, "--input")
    if not dest:
        dest = source.prefix.rsplit("/", 1)[-1] if source.prefix else source.bucket
    parts = dest.strip("/").split("/")
    if dest.startswith("/") or any(p in ("", ".", "..") for p in parts) or any(ord(c) < 0x20 for c in dest):
        raise StorageError(f"--input {text!r}: DEST must be a relative path within the workdir (no '..')")
    return Input(source, "/".join(parts))


class Place(NamedTuple):
    """One task's place in storage."""

    outputs: str  # rclone path of out/
    log: str  # rclone path of this run's log
    outputs_url: str  # the same, as a URL (what people are told)
    log_url: str


def place(url: StorageUrl, dispatch: str, task: int = 0, restart: int = 0) -> Place:
    """Where task ``task`` of ``dispatch`` keeps its outputs and the log of run ``restart``."""
    log = "job.log" if restart == 0 else f"job.r{restart}.log"
    return Place(url.remote(dispatch, str(task), "out"), url.remote(dispatch, str(task), log),
                 url.url(dispatch, str(task), "out"), url.url(dispatch, str(task), log))  # fmt: skip


class StoragePlan(NamedTuple):
    """What the wrapper does with storage: upload ``place`` every ``every_s`` (0: only at the
    end), restore ``out/`` from it first on a relaunch, copy ``inputs`` into the workdir."""

    place: Place | None  # None: only inputs (the job has no storage of its own)
    every_s: int
    restore: bool = False
    inputs: tuple[Input, ...] = ()


def rclone_config(remotes: Mapping[str, Mapping[str, str]]) -> str:
    """The text of rclone.conf: one section per remote (``s3``, ``gs``), its keys sorted.
    A value may not hold a line break (it would start a key of its own)."""
    lines: list[str] = []
    for name, keys in sorted(remotes.items()):
        if name not in SCHEMES:
            raise StorageError(f"storage remote {name!r}: not one of {', '.join(SCHEMES)}")
        lines.append(f"[{name}]")
        for key, value in sorted(keys.items()):
            if not re.fullmatch(r"[a-z_]+", key) or any(c in value for c in "\r\n\x00"):
                raise StorageError(f"storage setting {key!r} of {name}: not one line")  # the value is never said
            lines.append(f"{key} = {value}")
        lines.append("")
    return "\n".join(lines)


def storage_lines(plan: StoragePlan) -> tuple[list[str], list[str], list[str]]:
    """The wrapper's storage parts: its functions and what runs before the job (inputs, the
    restore, the uploader started), and what runs at the job's end (the uploader stopped,
    the last upload, ``stored`` written).  Each value one quoted word."""
    q = quote_arg
    flags = " ".join(RCLONE_FLAGS)
    setup = [
        "  # object storage: this machine writes there itself, with rclone, never via the shared VM",
        f'  _eps_rcl="${{_eps_root%/*/*}}/{RCLONE_BIN}"; [ -x "$_eps_rcl" ] || _eps_rcl=rclone',
        "  # AWS_CA_BUNDLE breaks rclone's S3 client (its own transport): the bundle goes as --ca-cert",
        f'  _eps_store() {{ env -u AWS_CA_BUNDLE "$_eps_rcl" --config "$_eps_root/{RCLONE_CONF}" {flags} \\',
        f'      --user-agent {MACHINE_AGENT} ${{AWS_CA_BUNDLE:+--ca-cert "$AWS_CA_BUNDLE"}} "$@"; }}',
        "  _eps_upper=",
        "  if ! command -v \"$_eps_rcl\" >/dev/null 2>&1; then",
        '    echo "eps: rclone is not on this machine: outputs cannot go to storage"',
        "  fi",
    ]
    before: list[str] = []
    for item in plan.inputs:
        dest = q(f"work/{item.dest}")
        src = q(item.source.remote())
        src_url = q(str(item.source))
        before += [
            f"  printf 'eps: input %s -> %s\\n' {src_url} {q(item.dest)}",
            f"  if ! _eps_store copy --error-on-no-transfer {src} {dest}; then  # a prefix not there is an error",
            f"    printf 'eps: input %s could not be copied; the job did not run\\n' {src_url}",
            "    _eps_end error 74",
            "  fi",
            "  _eps_n=0 _eps_k=0; while read -r _eps_x; do _eps_n=$((_eps_n + _eps_x)) _eps_k=$((_eps_k + 1)); done \\",
            f"    < <(find {dest} -type f -printf '%s\\n' 2>/dev/null)",
            f"  printf 'eps: input %s: %s bytes in %s files in %s\\n' {src_url} \"$_eps_n\" \"$_eps_k\" {q(item.dest)}",
        ]
    # the credentials leave the machine as soon as its last transfer is done (success or not):
    # with inputs only, once they are in; else once the last upload is confirmed or given up
    forget = f'    _eps_rm "$_eps_root/{RCLONE_CONF}"'
    if plan.place is None:
        return setup, [*before, forget[2:]], [forget]
    up = f"_eps_store copy out {q(plan.place.outputs)} && _eps_store copyto job.log {q(plan.place.log)}"
    setup.append(f"  _eps_upload() {{ {up}; }}")
    if plan.restore:
        before += [
            f"  printf 'eps: restoring $EPS_OUTPUT_DIR from %s\\n' {q(plan.place.outputs_url)}",
            f"  _eps_store copy {q(plan.place.outputs)} out ||",
        '    echo "eps: restore from storage failed: out/ starts empty"',
        ]
    if plan.every_s > 0:
        before += [
            "  # the uploader: every sync_every, out/ and the log; a TERM ends it after its upload in flight",
            "  ( _eps_q=; _eps_s=; trap '_eps_q=1; kill \"$_eps_s\" 2>/dev/null' TERM",
            "    while [ -z \"$_eps_q\" ]; do",
            f'      sleep {plan.every_s} & _eps_s=$!; wait "$_eps_s"',
            '      [ -n "$_eps_q" ] || _eps_upload || echo "eps: upload to storage failed; trying again"',
            "    done ) &",
            "  _eps_upper=$!",
        ]
    end = [
        '    if [ -n "$_eps_upper" ]; then kill -TERM "$_eps_upper" 2>/dev/null; wait "$_eps_upper" 2>/dev/null; fi',
        f"    if _eps_store copy out {q(plan.place.outputs)}; then",
        f"      printf 'eps: outputs in %s\\n' {q(plan.place.outputs_url)}; _eps_sr=0",
        '    else _eps_sr=$?; echo "eps: the last upload of the outputs failed (rclone exit $_eps_sr)"; fi',
        f"    _eps_store copyto job.log {q(plan.place.log)} || _eps_sr=${{_eps_sr/#0/1}}",
        forget,
        f'    _eps_put {STORED} "$_eps_sr"',
    ]
    return setup, before, end


#: The name under which a dispatch's kept values (mode 0600, never the ledger) hold its machine's
#: rclone.conf: ``_eps_``, a name no ``--env`` may take.
CONF_VALUE = "_eps_storage_conf"
#: The record the wrapper writes once the last upload is done: rclone's exit code (0: confirmed).
STORED = "stored"


def inputs_of(texts: Sequence[str]) -> tuple[Input, ...]:
    """Each ``--input``, parsed; the same destination twice is refused."""
    inputs = tuple(parse_input(t) for t in texts)
    dests = [i.dest for i in inputs]
    for i, d in enumerate(dests):
        if d in dests[:i] or any(d.startswith(o + "/") or o.startswith(d + "/") for o in dests[:i]):
            raise StorageError(f"--input {texts[i]!r}: its DEST {d!r} overlaps another input's")
    return inputs
