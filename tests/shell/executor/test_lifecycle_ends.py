"""The end of a job on the VM lane, through ``eps`` (issue 19): nothing the job started
outlives it (double-forked and ``setsid`` daemons), a signal eps did not send is "killed by
signal N" with exit 128+N (not a cancel), and ``--env PATH=/x`` cannot break the wrapper."""

from __future__ import annotations

import time
from typing import Any

from procs import pids_with as _pids_with

VM = ("cpu-small", "--duration", "30s")


def test_daemons_of_the_job_do_not_outlive_it(eps: Any) -> None:
    line = "(nohup sleep 10008 >/dev/null 2>&1 &); setsid nohup sleep 10009 >/dev/null 2>&1 & sleep 0.5; echo done"
    rc, out, err = eps("execute", *VM, "--wait", "--", "bash", "-c", line)
    assert rc == 0, (out, err)
    time.sleep(0.2)
    assert _pids_with("sleep 10008") == [] and _pids_with("sleep 10009") == []
    [row] = eps.status()
    assert row["result"] == "succeeded"


def test_a_signal_eps_did_not_send_is_not_a_cancel(eps: Any) -> None:
    rc, out, err = eps("execute", *VM, "--wait", "--", "bash", "-c", "kill -9 0")
    assert rc == 137, (out, err)
    [row] = eps.status()
    assert row["result"] == "killed by signal 9", row


def test_env_path_cannot_break_the_wrapper(eps: Any) -> None:
    rc, out, err = eps("execute", *VM, "--env", "PATH=/x", "--wait", "--", "echo hi")
    assert rc == 127, (out, err)  # the job's own failure (no bash on /x), recorded and pulled
    [row] = eps.status()
    assert row["state"] == "ended" and row["exit_code"] == 127, row
