"""``eps simulate`` offline: reading sacct dumps (columns in any order, censored and pending
jobs, bad files), the ledger's parks, the cluster's sacct through its login prefix (a recording
runner), and the command on a recorded dump of the test cluster (``fellows-sacct.txt``, made
with ``sacct -X -P -a -o JobID,JobName,QOS,Submit,Start,End,State,ReqTRES``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.core.states import AttemptState, Outcome
from eps.core.tables import DEFAULT_POLICY
from eps.shell.cli import main
from eps.shell.lanes.base import LaneOptions
from eps.shell.service.history import HistoryError, gpus_of, merge, parse_sacct, read_ledger
from eps.shell.state.ledger import Ledger

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
DUMP = HERE / "fellows-sacct.txt"
HEADER = "JobID|JobName|QOS|Submit|Start|End|State|ReqTRES"

# One dispatch walked the ladder (parked 600 s on high-eur, started after 45 s on normal-eur);
# another started at once; a job eps did not make is still pending (censored at the newest time).
SMALL = f"""{HEADER}
10|eps-ea1|high-eur|2026-11-02T09:00:00|None|2026-11-02T09:10:00|CANCELLED by 0|billing=1,cpu=1,gres/gpu=1,node=1
11|eps-ea1|normal-eur|2026-11-02T09:10:01|2026-11-02T09:10:46|2026-11-02T10:10:46|COMPLETED|cpu=1,gres/gpu=1,node=1
12|eps-eb2|high-eur|2026-11-02T09:20:00|2026-11-02T09:20:03|2026-11-02T09:50:03|COMPLETED|cpu=1,gres/gpu:h200=2,node=1
13|train|high-eur|2026-11-02T09:30:00|Unknown|Unknown|PENDING|cpu=8,gres/gpu=8,node=1
"""


def env_for(tmp: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(tmp), "PATH": str(tmp), "EPS_STATE_DIR": str(tmp / "state"), **extra}


def run(capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str], **kw: Any) -> tuple[int, str, str]:
    rc = main(argv, env=env, **kw)
    out, err = capsys.readouterr()
    return rc, out, err


def valid(doc: Any) -> None:
    schema = json.loads((ROOT / "eps" / "schemas" / "simulate.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


def test_a_dump_reads_in_any_column_order() -> None:
    waits = {w.job_id: w for w in parse_sacct(SMALL)}
    lines = [ln.split("|") for ln in SMALL.strip().splitlines()]
    order = [7, 3, 0, 6, 1, 5, 2, 4]
    shuffled = "\n".join("|".join(cells[i] for i in order) for cells in lines)
    assert {w.job_id: w for w in parse_sacct(shuffled)} == waits
    a, b, c, d = (waits[k] for k in ("10", "11", "12", "13"))
    assert (a.tier, a.dispatch, a.wait_s, a.started, a.gpus) == ("high-eur", "ea1", 600, False, 1)
    assert (b.wait_s, b.started, b.run_s) == (45, True, 3600)
    assert (c.dispatch, c.gpus, c.wait_s) == ("eb2", 2, 3)
    assert (d.dispatch, d.started, d.wait_s) == (None, False, 40 * 60 + 46)  # pending: censored at the newest time


def test_bad_dumps_say_where_in_one_line() -> None:
    with pytest.raises(HistoryError, match="missing ReqTRES"):
        parse_sacct("JobID|JobName|QOS|Submit|Start|End|State\n1|x|high-eur|||||\n", source="f.txt")
    with pytest.raises(HistoryError, match=r"f.txt:2: 3 columns"):
        parse_sacct(f"{HEADER}\n1|2|3\n", source="f.txt")
    with pytest.raises(HistoryError, match=r"f.txt:2: not a sacct time: 'yesterday'"):
        parse_sacct(f"{HEADER}\n1|eps-ea1|high-eur|yesterday|None|None|PENDING|\n", source="f.txt")
    assert parse_sacct("") == []
    assert gpus_of("billing=1,cpu=4,mem=1M") == 0 and gpus_of("gres/gpu:h200=4,node=1") == 4


def test_the_recorded_setting_replays_what_happened(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "s.txt").write_text(SMALL)
    rc, out, _ = run(capsys, ["simulate", "--sacct", str(tmp_path / "s.txt"), "--caps", "600,300", "--caps",
                              "300,300", "--json"], env_for(tmp_path))  # fmt: skip
    assert rc == 0
    doc = json.loads(out)
    valid(doc)
    now, tight = doc["settings"]
    assert now["caps"] == {"first_s": 600, "next_s": 300} == doc["recorded"]
    assert {d["dispatch"]: (d["lane"], d["start_s"], d["drawn"]) for d in now["dispatches"]} == {
        "ea1": ("normal-eur", 645, False), "eb2": ("high-eur", 3, False)}  # fmt: skip
    assert {d["dispatch"]: (d["lane"], d["start_s"]) for d in tight["dispatches"]} == {
        "ea1": ("normal-eur", 345), "eb2": ("high-eur", 3)}  # fmt: skip
    assert now["worst_case_s"] == 1200 and tight["worst_case_s"] == 900
    assert doc["history"]["tiers"][0] == {"tier": "high-eur", "waits": 3, "started": 1, "censored": 2}
    assert doc["warning"].startswith("small sample") and "Kaplan-Meier" in doc["estimator"]
    assert doc["source"] == {"kind": "sacct_file", "path": str(tmp_path / "s.txt"), "cluster": "fellows",
                             "ledger_waits": 0}  # fmt: skip


def test_the_recorded_dump_runs_offline_and_is_deterministic(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["simulate", "--sacct", str(DUMP), "--rounds", "20"]
    rc, out, _ = run(capsys, [*argv, "--json"], env_for(tmp_path))
    assert rc == 0
    doc = json.loads(out)
    valid(doc)
    caps = [(s["caps"]["first_s"], s["caps"]["next_s"]) for s in doc["settings"]]
    assert caps[:2] == [(600, 300), (300, 150)]
    assert len(doc["settings"]) == 6 and doc["history"]["dispatches"] > 100
    for s in doc["settings"]:
        assert 0 <= s["paid_share"] <= 1 and s["median_start_s"] is not None
        assert sum(s["lanes"].values()) == pytest.approx(1.0, abs=1e-3)
    assert json.loads(run(capsys, [*argv, "--json"], env_for(tmp_path))[1]) == doc
    rc, text, _ = run(capsys, argv, env_for(tmp_path, COLUMNS="140"))
    assert rc == 0 and "600/300 (now)" in text and "history: high-eur 269 waits (85 censored)" in text
    assert "estimator: Kaplan-Meier" in text


def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env = env_for(tmp_path)
    rc, _, err = run(capsys, ["simulate", "--sacct", str(DUMP), "--caps", "10m"], env)
    assert rc == 2 and err.count("\n") == 1 and "caps must be" in err
    rc, _, err = run(capsys, ["simulate", "--sacct", str(tmp_path / "missing.txt")], env)
    assert rc == 2 and err.count("\n") == 1 and "missing.txt" in err
    (tmp_path / "bad.txt").write_text("JobID|State\n1|PENDING\n")
    rc, _, err = run(capsys, ["simulate", "--sacct", str(tmp_path / "bad.txt"), "--json"], env)
    assert rc == 2 and json.loads(err)["error"]["code"] == "usage"
    rc, _, err = run(capsys, ["simulate", "--sacct", str(DUMP), "--cluster", "nope"], env)
    assert rc == 2 and "no SLURM cluster 'nope'" in err


class Recorder:
    def __init__(self, out: str, rc: int = 0, err: str = "") -> None:
        self.calls: list[list[str]] = []
        self.answer = (rc, out, err)

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        return self.answer


def test_the_cluster_is_read_through_its_login_prefix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[[clusters]]\nname = "fellows"\nlogin = ["ssh", "fellows-login"]\n')
    env = env_for(tmp_path, EPS_CONFIG=str(cfg))
    runner = Recorder(SMALL)
    rc, out, _ = run(capsys, ["simulate", "--since", "7d", "--caps", "600,300", "--json"], env,
                     lane_options=LaneOptions(slurm_runner=runner))  # fmt: skip
    assert rc == 0
    (call,) = runner.calls
    assert call[:2] == ["ssh", "fellows-login"]
    assert call[2].startswith("sacct -X -P -o JobID,JobName,QOS,Submit,Start,End,State,ReqTRES -S ")
    doc = json.loads(out)
    valid(doc)
    assert doc["source"]["kind"] == "cluster" and doc["source"]["since_s"] == 7 * 86_400
    runner = Recorder("", rc=1, err="sacct: error: Unable to contact slurm controller")
    rc, _, err = run(capsys, ["simulate"], env, lane_options=LaneOptions(slurm_runner=runner))
    assert rc == 1 and "sacct on fellows" in err and err.count("\n") == 1


def test_the_ledger_adds_the_parks_sacct_does_not_hold(tmp_path: Path) -> None:
    clock = [1_000_000.0]
    ledger = Ledger(str(tmp_path), clock=lambda: clock[0])
    ledger.new_dispatch("ec3", Job(intent="gpu-2", duration_s=3600))
    rung = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "rung 1", qos="high-eur")
    a = ledger.begin_attempt("ec3", rung, "eps-ec3")
    ledger.update_attempt(a.id, AttemptState.SUBMITTED, handle="501")
    ledger.update_attempt(a.id, AttemptState.PENDING)
    clock[0] += 600
    ledger.update_attempt(a.id, AttemptState.ADVANCED, outcome=Outcome.PARK_TIMEOUT.value)
    ledger.close()
    (found,) = read_ledger(str(tmp_path), DEFAULT_POLICY, "fellows", since_epoch=0)
    assert (found.job_id, found.tier, found.dispatch, found.gpus, found.wait_s, found.started) == (
        "501", "high-eur", "ec3", 2, 600, False)  # fmt: skip
    from_sacct = parse_sacct(SMALL)
    assert len(merge(from_sacct, [found])) == len(from_sacct) + 1
    assert merge([found], [found]) == [found]  # sacct wins for a job both hold
    assert read_ledger(str(tmp_path / "none"), DEFAULT_POLICY, "fellows", since_epoch=0) == []
    assert not (tmp_path / "none").exists()


def test_plot_draws_the_distributions(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "caps.png"
    rc, out, _ = run(capsys, ["simulate", "--sacct", str(DUMP), "--rounds", "2", "--plot", str(png)],
                     env_for(tmp_path))  # fmt: skip
    assert rc == 0 and f"plot: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
