"""Object storage benchmark: a job's outputs (1 GB) to S3, eps's job wrapper against plain rclone.

    python benchmarks/bench_storage_upload.py [--mb 1024] [--files 4] [--repeat 3] [--dir /tmp]

The S3 server is the tests' (tests/storage_support.py: moto's server on loopback behind the
logging proxy), so the disk and the server are this machine's on both sides; the figure
compares what eps adds to rclone.  The outputs are ``--files`` files of random data, ``--mb``
in all (256 MiB each by default: over rclone's 200 MiB upload cutoff, so multipart).

- (a) by hand: ``rclone --config FILE <eps's flags> copy out s3:BUCKET/PREFIX``;
- (b) as the wrapper does it: the setup lines of ``eps.core.storage.storage_lines`` (the
  ``_eps_store`` function and the choice of rclone) in ``bash``, then
  ``_eps_store copy out <place(...).outputs>`` from the task's directory.

Each run goes into a fresh bucket (dropped after), so each uploads everything; runs of (a) and
(b) interleave, ``sync`` before each.  rclone gets this machine's environment without AWS_*,
RCLONE_* and proxies (AWS_CA_BUNDLE, set here, makes rclone 1.60 fail).  Figures: wall seconds
and MB/s, median and best of ``--repeat`` runs, and the ratio b/a (goal: at most 1.2).  The
first run of each is checked byte for byte (sha256).  Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from storage_support import S3Server, sha256_tree  # noqa: E402

from eps.core.storage import RCLONE_CONF, RCLONE_FLAGS, StoragePlan, parse_url, place, storage_lines  # noqa: E402

CHUNK = 8 * 1024 * 1024
PROXIES = ("http_proxy", "https_proxy", "all_proxy")


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        left = size
        while left > 0:
            n = min(CHUNK, left)
            fh.write(os.urandom(n))
            left -= n


def rclone_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RCLONE_")) and k.lower() not in PROXIES}


def wrapper_script(dest_url: str) -> tuple[str, str]:
    """The wrapper's storage setup lines and the ``_eps_store copy out DEST`` it runs, in bash."""
    url = parse_url(dest_url)
    where = place(url, "bench", 0)
    setup, _before, _end = storage_lines(StoragePlan(where, every_s=0))
    return "\n".join(["set -u", *setup, f"_eps_store copy out {shlex.quote(where.outputs)}"]), where.outputs


def measure(server: S3Server, task: Path, local: dict[str, str], size: int, repeat: int) -> int:
    """Time (a) and (b), interleaved; print the figures.  1 if an upload was not the outputs."""
    out = task / "out"
    conf = task / RCLONE_CONF
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(server.rclone_conf())
    env = rclone_env()
    runs = iter(range(1, 1 << 20))

    def by_hand(bucket: str) -> str:
        cmd = ["rclone", "--config", str(conf), *RCLONE_FLAGS, "copy", str(out), f"s3:{bucket}/hand/out"]
        subprocess.run(cmd, check=True, env=env)
        return "hand/out"

    def as_wrapper(bucket: str) -> str:
        script, remote = wrapper_script(f"s3://{bucket}/wrapped")
        subprocess.run(["bash", "-c", script], check=True, cwd=task, env={**env, "_eps_root": str(task)})
        return remote.partition("/")[2]

    print(f"wrapper runs: {wrapper_script('s3://bucket/wrapped')[0].splitlines()[-1]}")
    times: dict[str, list[float]] = {"a": [], "b": []}
    for n in range(repeat):
        for name, upload in (("a", by_hand), ("b", as_wrapper)):
            bucket = server.make_bucket(f"eps-bench-{next(runs)}")
            os.sync()
            t0 = time.perf_counter()
            prefix = upload(bucket)
            times[name].append(time.perf_counter() - t0)
            if n == 0 and (got := server.digests(bucket, prefix)) != local:
                print(f"({name}) uploaded {len(got)} files, not the {len(local)} made (or not byte for byte)")
                return 1
            server.drop_bucket(bucket)
    mb = size / 1e6
    for name, what in (("a", "rclone copy by hand"), ("b", "eps wrapper _eps_store")):
        ts = times[name]
        med = statistics.median(ts)
        print(f"({name}) {what:<24} median {med:6.2f} s = {mb / med:6.1f} MB/s   best {min(ts):6.2f} s = "
              f"{mb / min(ts):6.1f} MB/s   runs: {' '.join(f'{t:.2f}' for t in ts)}")  # fmt: skip
    ratio = statistics.median(times["b"]) / statistics.median(times["a"])
    print(f"ratio b/a of medians {ratio:.2f}, of bests {min(times['b']) / min(times['a']):.2f}   (goal: <= 1.2)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="MiB of outputs in all")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the outputs go (needs --mb)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="eps-storage-bench-", dir=args.dir))
    server = None
    try:
        # the dispatch root's layout: <root>/<dispatch>/<task>, rclone.conf in it, out/ beside
        task = work / "runs" / "bench" / "0"
        began = time.perf_counter()
        size = args.mb * 1024 * 1024
        for i in range(args.files):
            write_random(task / "out" / f"shard{i}.bin", size // args.files + (size % args.files if i == 0 else 0))
        local = sha256_tree(task / "out")
        print(f"made {args.files} files, {args.mb} MiB of random data, in {time.perf_counter() - began:.1f} s")
        server = S3Server()
        return measure(server, task, local, size, args.repeat)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
