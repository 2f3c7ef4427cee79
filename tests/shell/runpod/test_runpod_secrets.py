"""Where the API key comes from, and that it never shows up anywhere but the request header."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from returns.result import Failure, Success
from runpod_testkit import KEY, FakeRunpod, Fault, SleepRecorder, cpu_rung, fast_settings

from eps.core.names import pod_name
from eps.core.outcome import FailureKind
from eps.shell.lanes.machines import MachineAccess
from eps.shell.lanes.runpod.client import RunpodClient
from eps.shell.lanes.runpod.lane import RunpodLane
from eps.shell.lanes.runpod.wire import ApiKey, RunpodSettings, load_api_key

#: These tests make no pod that eps would reach.
NO_MACHINES = MachineAccess("/nonexistent/eps-state", "root", "eps-runs", 600)


def test_key_from_the_environment_wins(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("apikey = 'from-file'\n")
    assert load_api_key({"RUNPOD_API_KEY": " from-env "}, config) == Success(ApiKey("from-env"))


def test_key_from_runpodctl_config(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("apikey = 'rpctl-key'\napiurl = 'https://api.runpod.io/graphql'\n")
    assert load_api_key({}, config) == Success(ApiKey("rpctl-key"))


def test_key_from_runpod_python_config(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[default]\napi_key = "py-key"\n')
    assert load_api_key({}, config) == Success(ApiKey("py-key"))


def test_default_config_file_is_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".runpod").mkdir()
    (tmp_path / ".runpod" / "config.toml").write_text("apiKey = 'home-key'\n")
    assert load_api_key({}) == Success(ApiKey("home-key"))


def test_no_key_is_auth_with_a_hint(tmp_path: Path) -> None:
    result = load_api_key({}, tmp_path / "missing.toml")
    assert isinstance(result, Failure)
    assert result.failure().kind is FailureKind.AUTH
    assert "RUNPOD_API_KEY" in result.failure().message


def test_a_broken_config_file_is_not_quoted(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"apikey = {KEY}\n")  # unquoted: invalid TOML that holds the key
    result = load_api_key({}, config)
    assert isinstance(result, Failure)
    assert KEY not in repr(result)


def test_reprs_hide_the_key() -> None:
    key = ApiKey(KEY)
    assert KEY not in repr(key)
    assert KEY not in str(key)
    assert KEY not in f"{key}"
    lane = RunpodLane(RunpodSettings(), {"RUNPOD_API_KEY": KEY}, access=NO_MACHINES)
    assert KEY not in repr(lane) and KEY not in repr(vars(lane))
    assert KEY not in repr(RunpodClient(key))


def test_the_key_never_leaks_through_any_path(
    fake: FakeRunpod, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Drive every failure class with logging at DEBUG everywhere (httpx, httpcore, stamina)
    and search every message, repr, log record and output for the key."""
    caplog.set_level(logging.DEBUG)
    fake.echo_key_in_401 = False
    sleeper = SleepRecorder()
    settings = fast_settings(fake.url)
    fake.stock["cpu3c"] = 0
    fake.forbidden.add("cpu3m")
    fake.rule_violation["cpu5g"] = "rule broken"
    fake.queue("POST", "/v2/pods", Fault(503), Fault(429, retry_after=1), Fault(422), Fault(502, process=True))
    rungs = [cpu_rung(i) for i in ("cpu3c-4-8", "cpu3m-4-32", "cpu5g-4-16", "cpu3g-4-16", "cpu5c-4-8")]

    seen: list[object] = []
    with RunpodClient(ApiKey(KEY), settings, sleep=sleeper) as c:
        seen.append(c)
        for d in range(6):  # each dispatch walks the rungs until one starts
            for i, rung in enumerate(rungs, start=1):
                attempt = c.start(rung, pod_name(f"d{d}", i))
                seen.append(attempt)
                if isinstance(attempt.result, Success):
                    break
        seen.append(c.list_pods())
        seen.append(c.get_pod("nope"))
        seen += [c.terminate(p.id) for p in c.list_pods().unwrap()]
    with RunpodClient(ApiKey(KEY + "x"), settings, sleep=sleeper) as wrong:
        fake.echo_key_in_401 = True  # a server that quotes the token back
        seen.append(wrong.start(cpu_rung(), "eps-z-1"))
    timeouts = fast_settings(fake.url, request_timeout_s=0.05)
    fake.queue("GET", "/v2/pods", *[Fault(delay_s=0.2)] * 3)
    with RunpodClient(ApiKey(KEY), timeouts, sleep=sleeper) as slow:
        seen.append(slow.list_pods())
    with RunpodClient(ApiKey(KEY), fast_settings("http://127.0.0.1:9"), sleep=sleeper) as down:
        seen.append(down.list_pods())

    kinds = {r.failure().kind for item in seen for r in [getattr(item, "result", item)] if isinstance(r, Failure)}
    assert {FailureKind.AUTH, FailureKind.TRANSIENT} <= kinds
    out = capsys.readouterr()
    assert caplog.records, "logging was captured"
    haystacks = [repr(x) for x in seen] + [str(x) for x in seen]
    haystacks += [r.getMessage() for r in caplog.records] + [repr(r.__dict__) for r in caplog.records]
    haystacks += [caplog.text, out.out, out.err]
    for text in haystacks:
        assert KEY not in text
    assert any("<redacted>" in h for h in haystacks)  # the echoed token was scrubbed, not just absent
    assert all(r.headers["authorization"].startswith("Bearer ") for r in fake.requests)


def test_lane_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    assert load_api_key().failure().kind is FailureKind.AUTH
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    lane = RunpodLane(RunpodSettings(), {"RUNPOD_API_KEY": KEY}, access=NO_MACHINES)
    client = lane.client()
    assert isinstance(client, Success)
    assert KEY not in repr(client)
    assert isinstance(RunpodLane(RunpodSettings(), {}, access=NO_MACHINES).client(), Failure)  # no key anywhere: AUTH
