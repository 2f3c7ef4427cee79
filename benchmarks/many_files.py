"""The red-team rule "100k files" on outputs, at full size: tests/shell/faults/test_faults_many_files.py
with ``EPS_MANY_FILES`` files (100,000 by default) on each path, its figures printed.

    python benchmarks/many_files.py [--files 100000] [--only vm|storage]

- ``vm``: a job on the GCP fake (the real test sshd) writes the files; they come back to the
  state directory by the end's rsync (no storage).  Figure: ``execute --wait`` seconds, from
  the command to its end (the VM's bring-up, the job and the pull).
- ``storage``: the same job with storage on moto's S3 behind the logging proxy: the machine's
  rclone uploads them (``execute --wait`` seconds), ``eps pull`` brings them from the bucket
  (``pull`` seconds).
- Memory: the peak (VmHWM, MB) of eps's own processes (``eps``: the command, ``supervisor``: the
  dispatch's supervisor) and of each tool they ran (rsync, ssh, rclone), sampled every 0.1 s.

The test itself asserts every file back, no event or output line per file, and eps's peak
memory under its bound.  Prints figures; the run takes minutes (moto takes a few hundred PUTs
a second).  Any pytest run that touches SLURM needs /tmp/eps-slurm.lock; this one does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/shell/faults/test_faults_many_files.py"
NAMES = {"vm": "test_many_files_come_back_through_the_vm_pull_path",
         "storage": "test_many_files_go_to_storage_and_come_back_by_eps_pull"}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--only", choices=sorted(NAMES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="eps-many-") as tmp:
        report = Path(tmp) / "figures.jsonl"
        env = {**os.environ, "EPS_MANY_FILES": str(args.files), "EPS_MANY_FILES_REPORT": str(report)}
        picked = [NAMES[args.only]] if args.only else list(NAMES.values())
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(f"{TEST}::{n}" for n in picked)]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        figures = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    for f in figures:
        print(f"{f['path']:8} {f['files']:>7} files  execute --wait {f['execute_s']:8.1f} s"
              + (f"  pull {f['pull_s']:8.1f} s" if "pull_s" in f else "")
              + f"  events {f['events']}")  # fmt: skip
        for key in ("peak_mb", "execute_peak_mb", "pull_peak_mb"):
            if key in f:
                print(f"         peak MB ({key.removesuffix('_peak_mb').removesuffix('peak_mb') or 'all'}): "
                      + ", ".join(f"{k} {v}" for k, v in f[key].items()))  # fmt: skip
    print(f"pytest: exit {done.returncode} in {wall:.0f} s")
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
