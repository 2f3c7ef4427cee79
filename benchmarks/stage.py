"""Staging benchmark: ship a workdir to the test sshd and pull outputs back, eps against plain rsync.

    python benchmarks/stage.py [--files 10000] [--big-mb 1024] [--out-mb 1024] [--repeat 5] [--dir /tmp]

Needs root and the test sshd (``bash tests/shell/ssh/sshd.sh start``; this script starts it).
The workdir is ``--files`` small files (1-4 KiB, in 100 directories) plus one ``--big-mb``
file; the outputs are ``--out-mb`` in 4 files.  The "remote" is 127.0.0.1:2222, so the disk is
this machine's on both ends; both sides use the same ssh options (eps's key, -F none ...), so
the figure compares what eps adds: selecting the files (.gitignore/.epsignore), the explicit
file list, ``--rsync-path mkdir``.  Figures: wall seconds, median and best of ``--repeat``
runs, eps and rsync interleaved, ``sync`` before each run (one run's writeback must not land
on the next); on a 2-core machine single runs vary by +-30 %, so read the medians:

- first upload, eps (``select_workdir`` + ``upload_files``) vs ``rsync -a TREE/ host:DEST/``,
  each into an empty destination (goal: eps at most 1.2 x);
- second upload of the unchanged tree, eps (goal: under 2 s) and rsync;
- pulling the outputs, eps ``download_dir`` vs ``rsync -a host:OUT/ LOCAL/`` (goal: at most 1.2 x).
Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from returns.result import Success

from eps.shell.remote.ignore import select_workdir
from eps.shell.remote.keys import ensure_key
from eps.shell.remote.ssh import Remote
from eps.shell.remote.sync import download_dir, rsync_rsh, upload_files

ROOT = Path(__file__).resolve().parents[1]
SSHD_SH = ROOT / "tests" / "shell" / "ssh" / "sshd.sh"
AUTHORIZED_KEYS = Path("/var/lib/eps-test-sshd/authorized_keys")
CHUNK = 8 * 1024 * 1024


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        left = size
        while left > 0:
            n = min(CHUNK, left)
            fh.write(os.urandom(n))
            left -= n


def make_workdir(root: Path, files: int, big_mb: int) -> None:
    for i in range(files):
        path = root / f"pkg{i % 100:02d}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(1024 + (i * 37) % 3072))
    write_random(root / "data" / "big.bin", big_mb * 1024 * 1024)
    (root / ".gitignore").write_text("__pycache__/\n*.pyc\n")


def timed(reset: Callable[[], None], run: Callable[[], None]) -> float:
    reset()
    os.sync()  # start each run with no dirty pages of the previous one still being written
    began = time.perf_counter()
    run()
    return time.perf_counter() - began


def duel(
    repeat: int, reset: Callable[[], None], eps: Callable[[], None], plain: Callable[[], None]
) -> tuple[list[float], list[float]]:
    """Wall seconds of eps and of plain rsync, runs interleaved (eps, plain, eps, ...)."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        a.append(timed(reset, eps))
        b.append(timed(reset, plain))
    return a, b


def report(what: str, eps: list[float], plain: list[float], goal: str) -> None:
    me, mp = statistics.median(eps), statistics.median(plain)
    print(
        f"{what:<17} eps median {me:6.2f} s (min {min(eps):5.2f})   rsync -a median {mp:6.2f} s (min {min(plain):5.2f})"
        f"   ratio of medians {me / mp:.2f}, of mins {min(eps) / min(plain):.2f}   ({goal})"
    )
    print(f"{'':<17} runs: eps {' '.join(f'{t:.2f}' for t in eps)} | rsync {' '.join(f'{t:.2f}' for t in plain)}")


def check(result: object) -> None:
    if not isinstance(result, Success):
        raise SystemExit(f"stage.py: {result}")


def measure(args: argparse.Namespace, work: Path, remote: Remote) -> None:
    rsh = rsync_rsh(remote)  # the very -e eps gives rsync: same ssh, same options
    assert rsh is not None
    host = "root@127.0.0.1"
    tree, outputs, pulled = work / "tree", work / "remote-out", work / "pulled"
    began = time.perf_counter()
    make_workdir(tree, args.files, args.big_mb)
    for i in range(4):
        write_random(outputs / f"shard{i}.bin", args.out_mb * 1024 * 1024 // 4)
    made = time.perf_counter() - began
    print(f"made {args.files} small files + {args.big_mb} MB, and {args.out_mb} MB of outputs, in {made:.1f} s")

    def clear(path: Path) -> Callable[[], None]:
        return lambda: shutil.rmtree(path, ignore_errors=True)

    def eps_upload() -> None:
        workdir = select_workdir(str(tree), max_bytes=4 * 1024**3).unwrap()
        check(upload_files(remote, workdir.root, workdir.files, str(work / "remote")))

    def rsync_upload() -> None:
        subprocess.run(["rsync", "-a", "-e", rsh, f"{tree}/", f"{host}:{work}/remote/"], check=True)

    def rsync_pull() -> None:
        subprocess.run(["rsync", "-a", "-e", rsh, f"{host}:{outputs}/", f"{pulled}/"], check=True)

    rsync_upload()  # warm the page cache and the host key once, so neither side pays for it
    t0 = time.perf_counter()
    listing = select_workdir(str(tree), max_bytes=4 * 1024**3).unwrap()
    t_list = time.perf_counter() - t0
    t_eps, t_rsync = duel(args.repeat, clear(work / "remote"), eps_upload, rsync_upload)
    t_eps_again, t_rsync_again = duel(args.repeat, lambda: None, eps_upload, rsync_upload)
    pull_eps = lambda: check(download_dir(remote, str(outputs), str(pulled)))  # noqa: E731
    t_pull_eps, t_pull_rsync = duel(args.repeat, clear(pulled), pull_eps, rsync_pull)

    mib = listing.total_bytes / 1024**2
    print(f"workdir: {len(listing.files)} files, {mib:.0f} MiB; selecting them (ignore rules): {t_list:.2f} s")
    report("first upload", t_eps, t_rsync, "goal: ratio <= 1.2")
    report("unchanged upload", t_eps_again, t_rsync_again, "goal: eps < 2 s")
    report("pull outputs", t_pull_eps, t_pull_rsync, "goal: ratio <= 1.2")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--big-mb", type=int, default=1024)
    parser.add_argument("--out-mb", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the trees go (needs ~4.5 GB)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("stage.py: needs root (the test sshd)", file=sys.stderr)
        return 2
    subprocess.run(["bash", str(SSHD_SH), "start"], check=True, capture_output=True)
    work = Path(tempfile.mkdtemp(prefix="eps-stage-bench-", dir=args.dir))
    key = ensure_key(str(work / "state")).unwrap()
    with open(AUTHORIZED_KEYS, "a") as fh:
        fh.write(key.public_key + "\n")
    try:
        measure(args, work, Remote.ssh("127.0.0.1", key, user="root", port=2222))
    finally:
        lines = AUTHORIZED_KEYS.read_text().splitlines()
        AUTHORIZED_KEYS.write_text("".join(line + "\n" for line in lines if line.strip() != key.public_key))
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
