"""``eps wait D`` of a dispatch that already ended says how it ended (found by the golden
record: it printed nothing, and ``--json`` no object, only the exit code spoke)."""

from __future__ import annotations

import json
from pathlib import Path

from faults_support import Eps, GcpTrap, RunpodTrap


def test_a_wait_after_the_end_says_how_it_ended(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    eps = Eps(tmp_path, gtrap.fake, rtrap.fake, detached=True)
    try:
        rc, out, err = eps.run("execute", "--wait", "--dispatch-id", "waited7", "cpu-small", "--duration", "20s",
                               "--pin", "vm", "--", "exit 3")  # fmt: skip
        assert rc == 3, (out, err)
        rc, out, err = eps.run("wait", "waited7")
        assert rc == 3, (out, err)
        assert "[waited7] ended:" in out + err, (out, err)
        rc, out, err = eps.run("wait", "waited7", "--json")
        assert rc == 3, (out, err)
        [ended] = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert (ended["event"], ended["dispatch"], ended["exit_code"]) == ("ended", "waited7", 3), ended
        rc, out, err = eps.run("attach", "waited7", "--json")  # attach shows the whole story, as before
        assert rc == 3 and [json.loads(x)["event"] for x in out.splitlines()].count("ended") == 1, (out, err)
    finally:
        eps.close()
