"""Moving files to and from a :class:`~eps.shell.remote.ssh.Remote` with rsync.

- Uploads send an explicit file list (``rsync -a --files-from=- --from0``, the
  list on stdin, so no name is ever an argument), over ``ssh -e`` with eps's
  options, through a login prefix, or between two local directories.  rsync's
  quick check (size + mtime) makes a second upload of an unchanged tree cost
  one file-list exchange.
- rsync's ssh is eps's own (:func:`~eps.shell.remote.ssh.ssh_options`): it shares the
  machine's master connection like every other command.
- The destination directory is made on the far side in the same connection
  (``--rsync-path='mkdir -p -- DIR && rsync'``), except through a robot login, which runs
  rsync and nothing else: there rsync itself makes only the destination's last component, and
  the caller plans the tree accordingly (:mod:`eps.shell.remote.robot`).
- A small file (the env file, the wrapper) travels on ssh's stdin into
  ``umask 077; cat > tmp; mv tmp file``: its content is never an argument, so it
  shows up in no process listing, no log and no error message.
- Several small files at once (a job's wrapper, env file and watcher) travel as one tar
  archive on ssh's stdin into :func:`unpack_line`: extracted under ``umask 077`` into a
  fresh private directory beside them, given their modes, then each renamed into place;
  one command instead of one per file, and still nothing of their content in an argument.
- rsync exit 24 (a source file vanished while it was being sent) counts as done:
  a workdir or an output directory may change under us.
- Sparse files stay sparse both ways (``--sparse``); no transfer recreates a device
  node or another special file (``--no-D``), and setuid/setgid bits are dropped.
- What a job wrote is hostile input to a download: a symlink that points out of the
  tree (absolute, or up through ``..``) is not recreated (``--safe-links``), and a
  single file (the log) arrives only as a regular file, installed by ``rename`` over
  whatever was at the target (a link there is replaced, never followed).
- A download never leaves a cut-short file under a real name: rsync writes each file to a
  temporary name beside it and renames it into place once whole, and removes the temporary
  one when the transfer fails (a full disk midway: ENOSPC); so no ``--inplace``,
  ``--partial``, ``--append`` or ``-P`` ever (:data:`RSYNC_DOWNLOAD`).
- What a download would write is learned first by the same transfer run dry
  (:func:`download_size`: ``--dry-run --stats``; nothing is written), through the same ssh, the
  same login prefix, the same robot login: a pull that would not leave the disk's margin free
  is not started (:mod:`eps.core.room`).
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import stat
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from returns.result import Failure, Result, Success

from eps.shell.remote.errors import RemoteErrorKind, RemoteFailure
from eps.shell.remote.process import NOT_FOUND, Completed, Runner, run_process
from eps.shell.remote.ssh import (
    BRIEF,
    Patience,
    Remote,
    check_remote,
    classify_ssh,
    last_line,
    retrying,
    ssh_options,
    through_master,
)

#: rsync: "Partial transfer due to vanished source files".
RSYNC_VANISHED = 24
#: rsync: "Partial transfer due to error" (a source that is not there, among others).
RSYNC_PARTIAL = 23
#: What the sending rsync says when the directory it is to send from is not there
#: (``rsync: [sender] change_dir "/x" failed: No such file or directory (2)``).
_NO_SOURCE_DIR = "No such file or directory"
#: The host name rsync is given for a login-prefix target (the prefix knows the real one).
LOGIN_HOST = "eps-login"
#: Base options: archive, but files take the receiving user's owner and group, holes stay
#: holes, no device or special file is ever made, and no setuid/setgid bit survives.
RSYNC_BASE = ("rsync", "-a", "--no-owner", "--no-group", "--no-D", "--sparse", "--chmod=ug-s")
#: A download also leaves out every symlink that points out of the tree it brings, and compares
#: modification times to the nanosecond (``--modify-window=-1``; the receiver is this machine's
#: rsync, 3.1.3 or later): a file rewritten at the same size within the second of the last pull
#: (a checkpoint counter going from 15 to 16) is brought again, not skipped as unchanged.
RSYNC_DOWNLOAD = (*RSYNC_BASE, "--safe-links", "--modify-window=-1")
#: Run a download dry, to learn what it would write: rsync's own count of it (plain digits).
RSYNC_MEASURE = ("--dry-run", "--stats", "--no-human-readable")


def rsync_rsh(remote: Remote) -> str | None:
    """The ``-e`` value for ``remote`` (None for a local copy), in rsync's own
    quoting (words split on spaces, single or double quotes, no backslashes)."""
    if remote.login:
        # rsync runs `RSH HOST rsync --server ...`; drop HOST, run the prefix with the rest.
        n = len(remote.login)
        script = f'exec "${{@:1:{n}}}" "${{@:{n + 2}}}"'
        return " ".join(_rsync_word(w) for w in ("bash", "-c", script, "eps-rsh", *remote.login))
    if remote.host is None:
        return None
    return " ".join(_rsync_word(w) for w in ("ssh", *ssh_options(remote)))


def remote_spec(remote: Remote, path: str) -> str:
    """rsync's ``HOST:PATH`` (``[v6]:PATH``) for ``remote``, or the plain path locally."""
    if remote.login:
        return f"{LOGIN_HOST}:{path}"
    if remote.host is None:
        return path
    host = f"[{remote.host}]" if ":" in remote.host else remote.host
    return f"{remote.user}@{host}:{path}" if remote.user else f"{host}:{path}"


def upload_argv(
    remote: Remote, local_root: str, remote_dir: str, *, compress: bool = False, implied_dirs: bool = True
) -> list[str]:
    """rsync argv that sends the files named on stdin (NUL-separated, relative to
    ``local_root``) into ``remote_dir``, creating it (through a robot login: only its last
    component).  ``implied_dirs=False``: the directories above a listed name are not sent; those
    missing on the far side are made, those there are left as they are (``--no-implied-dirs``)."""
    argv = [*RSYNC_BASE, "--files-from=-", "--from0"]
    if compress:
        argv.append("-z")
    if not implied_dirs:
        argv.append("--no-implied-dirs")
    rsh = rsync_rsh(remote)
    if rsh is not None:
        argv += ["-e", rsh]
        if not remote.robot:  # a robot login runs rsync alone: no mkdir before it
            argv.append(f"--rsync-path=mkdir -p -- {shlex.quote(remote_dir)} && rsync")
    return [*argv, _slash(local_root), remote_spec(remote, _slash(remote_dir))]


def download_argv(remote: Remote, remote_path: str, local_path: str, *, directory: bool) -> list[str]:
    """rsync argv that brings ``remote_path`` (a directory's contents, or one file) to ``local_path``.
    One file comes only when it is a regular file (a symlink is skipped, not copied)."""
    argv = [*RSYNC_DOWNLOAD, *(() if directory else ("--no-links",))]
    rsh = rsync_rsh(remote)
    if rsh is not None:
        argv += ["-e", rsh]
    src = _slash(remote_path) if directory else remote_path
    dst = _slash(local_path) if directory else local_path
    return [*argv, remote_spec(remote, src), dst]


def upload_files(
    remote: Remote,
    local_root: str,
    files: Sequence[str],
    remote_dir: str,
    *,
    compress: bool = False,
    implied_dirs: bool = True,
    timeout_s: float | None = None,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[None, RemoteFailure]:
    """Send ``files`` (relative to ``local_root``, e.g. :attr:`Workdir.files`) to ``remote_dir``
    (``implied_dirs``: see :func:`upload_argv`)."""
    if remote.is_local:
        try:
            os.makedirs(remote_dir, exist_ok=True)
        except OSError as exc:
            return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, f"cannot create {remote_dir}: {exc.strerror}"))
    argv = upload_argv(remote, local_root, remote_dir, compress=compress, implied_dirs=implied_dirs)
    listing = b"".join(os.fsencode(f) + b"\0" for f in files)
    return _transfer(remote, argv, listing, f"upload to {remote_dir}", timeout_s, patience, runner, sleep)


def download_dir(
    remote: Remote,
    remote_dir: str,
    local_dir: str,
    *,
    timeout_s: float | None = None,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[None, RemoteFailure]:
    """Bring the contents of ``remote_dir`` into ``local_dir`` (created), byte for byte."""
    try:
        os.makedirs(local_dir, exist_ok=True)
    except OSError as exc:
        return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, f"cannot create {local_dir}: {exc.strerror}"))
    argv = download_argv(remote, remote_dir, local_dir, directory=True)
    return _transfer(remote, argv, None, f"download of {remote_dir}", timeout_s, patience, runner, sleep)


def download_matching(
    remote: Remote,
    remote_dir: str,
    includes: Sequence[str],
    local_dir: str,
    *,
    timeout_s: float | None = 120,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[bool, RemoteFailure]:
    """Bring what of ``remote_dir`` matches the rsync ``includes`` (``/pid``, ``/*/``,
    ``/*/started-at``: anchored at ``remote_dir``; everything else excluded, no symlink ever)
    into ``local_dir`` (created).  A name that is not there is no error.  ``False``:
    ``remote_dir`` itself is not there (nothing brought)."""
    try:
        os.makedirs(local_dir, exist_ok=True)
    except OSError as exc:
        return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, f"cannot create {local_dir}: {exc.strerror}"))
    argv = [*RSYNC_DOWNLOAD, "--no-links", *(f"--include={i}" for i in includes), "--exclude=*"]
    rsh = rsync_rsh(remote)
    if rsh is not None:
        argv += ["-e", rsh]
    argv += [remote_spec(remote, _slash(remote_dir)), _slash(local_dir)]
    what = f"download from {remote_dir}"

    def attempt() -> Result[Completed, RemoteFailure]:
        done = runner(argv, stdin=None, timeout_s=timeout_s)
        if done.returncode == RSYNC_PARTIAL and _NO_SOURCE_DIR in done.stderr and "change_dir" in done.stderr:
            return Success(done)
        return _classify_rsync(remote, done, what, timeout_s)

    got = retrying(through_master(remote, attempt), patience, sleep=sleep)
    return got.map(lambda done: done.returncode != RSYNC_PARTIAL)


class Sizes(NamedTuple):
    """What rsync says a transfer writes (``--stats``): bytes of the files it sends, how many
    files it sends, how many directories it makes."""

    size: int
    files: int
    dirs: int


def download_size(
    remote: Remote,
    remote_path: str,
    local_path: str,
    *,
    directory: bool,
    timeout_s: float | None = None,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[Sizes, RemoteFailure]:
    """What bringing ``remote_path`` to ``local_path`` (as :func:`download_dir`, ``directory``,
    or :func:`download_file`, which lands whole: give it a path that is not there) would write
    here: the same rsync run dry (nothing is written, nothing made).  It fails as the transfer
    itself would (no such directory there, the machine unreachable)."""
    argv = download_argv(remote, remote_path, local_path, directory=directory)
    argv = [argv[0], *RSYNC_MEASURE, *argv[1:]]
    what = f"sizing the download of {remote_path}"

    def attempt() -> Result[Completed, RemoteFailure]:
        return _classify_rsync(remote, runner(argv, stdin=None, timeout_s=timeout_s), what, timeout_s)

    got = retrying(through_master(remote, attempt), patience, sleep=sleep)
    return got.bind(lambda done: _sizes(done.stdout, remote, what))


def existing_ancestor(path: str) -> str:
    """``path`` (absolute) when it is there, else its nearest ancestor that is."""
    here = os.path.abspath(path)
    while not os.path.lexists(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    return here


def parse_stats(text: str) -> Sizes | None:
    """rsync's ``--stats``: "Total transferred file size", "Number of regular files
    transferred" and the directories of "Number of created files"; ``None`` without the first.
    Digits may be grouped (``1,234``, ``1.234``: a locale's separators)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        name = name.strip()
        if name == "Number of created files":
            _, found, dirs = rest.partition("dir:")
            fields["dirs"] = _number(dirs.split(",")[0].split(")")[0]) if found else 0
        elif name in ("Total transferred file size", "Number of regular files transferred"):
            fields[name] = _number(rest.split()[0] if rest.split() else "")
    size = fields.get("Total transferred file size", -1)
    if size < 0:
        return None
    return Sizes(size, max(fields.get("Number of regular files transferred", 0), 0), max(fields.get("dirs", 0), 0))


def _number(word: str) -> int:
    digits = word.strip().replace(",", "").replace(".", "").replace("'", "")
    return int(digits) if digits.isdigit() else -1


def _sizes(stdout: str, remote: Remote, what: str) -> Result[Sizes, RemoteFailure]:
    sizes = parse_stats(stdout)
    if sizes is None:
        why = f"{what} on {remote.describe()}: rsync printed no transfer size ({last_line(stdout) or 'nothing'})"
        return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, why))
    return Success(sizes)


def download_file(
    remote: Remote,
    remote_path: str,
    local_path: str,
    *,
    timeout_s: float | None = None,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[None, RemoteFailure]:
    """Bring one regular file (a log) to ``local_path``; its directory is created.  It lands
    under a temporary name first and is renamed into place: whatever was at ``local_path``
    (a symlink, say) is replaced, never written through.  A remote file that is not a
    regular file (a symlink the job planted) is not brought: a TRANSFER failure saying so."""
    local_path = os.path.abspath(local_path)
    parent = os.path.dirname(local_path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, f"cannot create {parent}: {exc.strerror}"))
    tmp = os.path.join(parent, f".{os.path.basename(local_path)}.eps-{os.getpid()}-{threading.get_ident()}.tmp")
    argv = download_argv(remote, remote_path, tmp, directory=False)
    try:
        done = _transfer(remote, argv, None, f"download of {remote_path}", timeout_s, patience, runner, sleep)
        if isinstance(done, Failure):
            return done
        if not os.path.lexists(tmp) or not stat.S_ISREG(os.lstat(tmp).st_mode):
            why = f"{remote_path} on {remote.describe()} is not a regular file (not brought)"
            return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, why))
        try:
            os.replace(tmp, local_path)
        except OSError as exc:
            return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, f"cannot write {local_path}: {exc.strerror}"))
        return done
    finally:
        with contextlib.suppress(OSError):
            if os.path.lexists(tmp) and not os.path.isdir(tmp):
                os.unlink(tmp)


def put_file(
    remote: Remote,
    remote_path: str,
    content: bytes,
    *,
    mode: int = 0o600,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[None, RemoteFailure]:
    """Write ``content`` to ``remote_path`` with ``mode`` (default 0600), atomically,
    creating its directory.  The content goes on stdin: never into argv or a message."""
    if remote.is_local:
        return _put_local(remote_path, content, mode)
    path = shlex.quote(remote_path)
    tmp = shlex.quote(remote_path + ".tmp")
    parent = shlex.quote(os.path.dirname(remote_path) or ".")
    command = f"umask 077 && mkdir -p -- {parent} && cat > {tmp} && chmod {mode:o} {tmp} && mv -f -- {tmp} {path}"
    written = check_remote(
        remote, command, f"writing {remote_path}", stdin=content, patience=patience, runner=runner, sleep=sleep
    )
    return written.map(lambda _: None)


class Packed(NamedTuple):
    """Small files for one command: their names (relative, in the target directory), modes and
    the tar archive that carries them (on stdin)."""

    names: tuple[tuple[str, int], ...]
    archive: bytes


def pack(files: Sequence[tuple[str, bytes, int]]) -> Packed:
    """A tar archive of ``(name, content, mode)`` (plain names: no directory, no ``..``)."""
    import tarfile

    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, content, mode in files:
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"not a plain file name: {name!r}")
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode & 0o777, now
            tar.addfile(info, io.BytesIO(content))
    return Packed(tuple((name, mode) for name, _, mode in files), buffer.getvalue())


def unpack_line(directory: str, packed: Packed) -> str:
    """The shell line that puts the files of ``packed`` (its archive on stdin) into
    ``directory`` (made, private): extracted into a fresh ``.eps-stage.*`` directory there,
    each with its mode from the archive (``tar -p``: exactly, not cut by the umask), then
    renamed into place by one ``mv`` (a reader never sees half a file); the stage goes
    whatever happened.  Prints nothing; fails when any file could not be put."""
    d = directory.rstrip("/") or "/"
    d = d if d.startswith(("/", "./")) else f"./{d}"  # never an option to mkdir or mktemp
    where = shlex.quote(d)
    # each source is renamed to <directory>/<its name>: one process for all of them
    sources = " ".join(f'"$_eps_s"/{shlex.quote(name)}' for name, _ in packed.names)
    moves = f"mv -f -- {sources} {shlex.quote(d.rstrip('/') + '/')}" if packed.names else ":"
    stage = shlex.quote(f"{d}/.eps-stage.XXXXXX")
    return (
        f"umask 077 && mkdir -p -- {where} && _eps_s=$(mktemp -d {stage}) && "
        f'{{ tar -xpof - -C "$_eps_s" && {moves}; '
        f'_eps_e=$?; rm -rf -- "$_eps_s"; [ "$_eps_e" = 0 ]; }}'
    )


def _put_local(path: str, content: bytes, mode: int) -> Result[None, RemoteFailure]:
    tmp = f"{path}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, content)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, f"cannot write {path}: {exc.strerror}"))
    return Success(None)


def _transfer(
    remote: Remote,
    argv: list[str],
    stdin: bytes | None,
    what: str,
    timeout_s: float | None,
    patience: Patience,
    runner: Runner,
    sleep: Callable[[float], None],
) -> Result[None, RemoteFailure]:
    def attempt() -> Result[Completed, RemoteFailure]:
        return _classify_rsync(remote, runner(argv, stdin=stdin, timeout_s=timeout_s), what, timeout_s)

    return retrying(through_master(remote, attempt), patience, sleep=sleep).map(lambda _: None)


def _classify_rsync(
    remote: Remote, done: Completed, what: str, timeout_s: float | None
) -> Result[Completed, RemoteFailure]:
    where = remote.describe()
    if done.timed_out:
        return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, f"{what} on {where} took over {timeout_s} s"))
    if done.returncode in (0, RSYNC_VANISHED):
        return Success(done)
    if done.returncode == NOT_FOUND and done.stderr.startswith("rsync:") and "command not found" in done.stderr:
        return Failure(RemoteFailure.of(RemoteErrorKind.MISSING_TOOL, "rsync is not installed on this machine"))
    if "rsync: command not found" in done.stderr or "rsync: not found" in done.stderr:
        return Failure(RemoteFailure.of(RemoteErrorKind.MISSING_TOOL, f"rsync is not installed on {where}"))
    full = any(cause in done.stderr for cause in _FULL_DISK)  # then rsync's broken pipe is its own, not ssh's
    kind = RemoteErrorKind.TRANSFER if full else classify_ssh(done.stderr)
    if kind is None and "connection unexpectedly closed" in done.stderr and not remote.is_local:
        kind = RemoteErrorKind.UNREACHABLE
    message = _rsync_message(done.stderr) or f"exit {done.returncode}"
    return Failure(RemoteFailure.of(kind or RemoteErrorKind.TRANSFER, f"{what} on {where} failed: {message}"))


#: A disk that filled (either end): the cause, whichever of rsync's processes saw it first
#: (its generator may say "Broken pipe" before its receiver says why).
_FULL_DISK = ("No space left on device", "Disk quota exceeded")


def _rsync_message(stderr: str) -> str:
    """The line that says why: a full disk's, else ssh's own, else rsync's first error (its
    last is a summary)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if any(cause in line for cause in _FULL_DISK):
            return line
    for line in lines:
        if not line.startswith("rsync") and classify_ssh(line) is not None:
            return line
    for line in lines:
        if line.startswith(("rsync:", "rsync error:")) and "connection unexpectedly closed" not in line:
            return line
    return last_line(stderr)


def _slash(path: str) -> str:
    return path if path.endswith("/") else path + "/"


def _rsync_word(word: str) -> str:
    if word and not any(c in word for c in " '\"\t\n"):
        return word
    if "'" not in word:
        return f"'{word}'"
    if '"' not in word:
        return f'"{word}"'
    raise ValueError(f"cannot pass {word!r} to rsync -e (it holds both quote characters)")
