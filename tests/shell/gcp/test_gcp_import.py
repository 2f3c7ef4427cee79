"""Importing the GCP adapter must stay cheap: ``eps plan`` never loads compute_v1."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_adapter_does_not_import_compute_v1():
    probe = (
        "import sys, eps.shell.lanes.gcp.client, eps.shell.lanes.gcp.lane, eps.shell.lanes.gcp.wire\n"
        "heavy = ('google.cloud.compute', 'google.api_core', 'stamina')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
