"""RunPod pods report where ssh reaches them, the way the API document shapes it, and keep
the ``env`` they were created with (``PUBLIC_KEY`` for sshd).

The ``Pod`` schema has no ``publicIp``/``portMappings`` (those are the retired REST v1 /
GraphQL names): the address is ``ssh.direct`` (``{host, port, username, command}``, only
when ``ports`` has ``22/tcp`` and the pod is RUNNING) and ``runtime.ports``
(``{private, public, type, ip}``).  ``public_ip`` and ``ssh_port`` are the fake's knobs."""

from __future__ import annotations

from typing import Any

import httpx
from returns.result import Success
from runpod_testkit import KEY, FakeRunpod, SleepRecorder, cpu_rung, fast_settings, schema_validator

from eps.core.model import Job
from eps.shell.lanes.runpod.client import RunpodClient
from eps.shell.lanes.runpod.wire import ApiKey, PodStatus

AUTH = {"Authorization": f"Bearer {KEY}"}
BODY = {"name": "eps-s-1", "image": "ubuntu:24.04", "cpu": {"id": "cpu3g", "vcpuCount": 4}}
POD = schema_validator("Pod")
KEY_LINE = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEpsTestKey eps@runner"


def create(fake: FakeRunpod, **extra: Any) -> str:
    created = httpx.post(f"{fake.url}/v2/pods", json={**BODY, **extra}, headers=AUTH)
    assert created.status_code == 201, created.json()
    return created.json()["id"]


def get(fake: FakeRunpod, pod_id: str) -> dict[str, Any]:
    return httpx.get(f"{fake.url}/v2/pods/{pod_id}", headers=AUTH).json()


def test_a_pod_with_22_tcp_reports_its_address_once_running(fake: FakeRunpod) -> None:
    pod_id = create(fake, ports=["8888/http", "22/tcp"])
    assert fake.live_pods()[0]["ssh"] == {"proxy": None, "direct": None}  # PROVISIONING: no machine yet
    starting = get(fake, pod_id)  # this GET moves it to STARTING
    assert starting["status"] == "STARTING"
    assert starting["ssh"]["direct"] is None
    proxy = starting["ssh"]["proxy"]
    assert proxy["host"] == "ssh.runpod.io" and proxy["username"].startswith(f"{pod_id}-")
    running = get(fake, pod_id)
    assert running["status"] == "RUNNING"
    assert running["ssh"]["direct"] == {
        "host": "127.0.0.1",
        "port": 40000,
        "username": "root",
        "command": "ssh root@127.0.0.1 -p 40000",
    }
    assert running["runtime"] == {
        "uptime": 0,
        "ports": [
            {"private": 22, "public": 40000, "type": "tcp", "ip": "127.0.0.1"},
            {"private": 8888, "public": None, "type": "http", "ip": None},
        ],
    }
    assert list(POD.iter_errors(running)) == []
    assert fake.ssh_address(pod_id) == ("127.0.0.1", 40000)


def test_the_address_is_a_knob(fake: FakeRunpod) -> None:
    fake.public_ip = "127.0.0.2"
    fake.ssh_port = 2222
    pod_id = create(fake, ports=["22/tcp"])
    for _ in range(2):
        get(fake, pod_id)
    assert fake.ssh_address(pod_id) == ("127.0.0.2", 2222)
    with FakeRunpod(api_key=KEY, public_ip="192.0.2.7", ssh_port=22022, gets_to_running=1) as other:
        pod_id = create(other, ports=["22/tcp"])
        direct = get(other, pod_id)["ssh"]["direct"]
    assert (direct["host"], direct["port"], direct["command"]) == ("192.0.2.7", 22022, "ssh root@192.0.2.7 -p 22022")


def test_each_pod_gets_its_own_public_port(fake: FakeRunpod) -> None:
    ports = []
    for i in range(3):
        pod_id = fake.add_pod({**BODY, "name": f"eps-s-{i}", "ports": ["22/tcp"]})
        ports.append(fake.ssh_address(pod_id))
    assert ports == [("127.0.0.1", 40000), ("127.0.0.1", 40001), ("127.0.0.1", 40002)]


def test_no_22_tcp_no_direct_address(fake: FakeRunpod) -> None:
    pod_id = create(fake)  # what eps sends today: no ports
    get(fake, pod_id)
    running = get(fake, pod_id)
    assert running["status"] == "RUNNING"
    assert running["ssh"]["direct"] is None
    assert running["runtime"] == {"uptime": 0, "ports": []}
    assert fake.ssh_address(pod_id) is None


def test_a_stopped_pod_loses_its_address(fake: FakeRunpod) -> None:
    from runpod_testkit import fake_server

    pod_id = fake.add_pod({**BODY, "ports": ["22/tcp"]})
    assert fake.ssh_address(pod_id) is not None
    with fake.lock:
        fake_server._set_status(fake.pods[pod_id].doc, "EXITED")
    assert fake.ssh_address(pod_id) is None
    exited = fake.live_pods()[0]
    assert (exited["runtime"], exited["cost"]) == (None, 0.0)


def test_the_env_eps_sends_is_kept(fake: FakeRunpod, sleeper: SleepRecorder) -> None:
    job = Job("cpu-small", 600, command=("python", "run.py"))

    with RunpodClient(ApiKey(KEY), fast_settings(fake.url), sleep=sleeper) as c:
        _result = c.start(cpu_rung(), "eps-d7-1", job=job, dispatch_id="d7")
    handle = _result.result.unwrap()
    assert fake.env_of(handle.id) == {"EPS_POD_NAME": "eps-d7-1", "EPS_DISPATCH_ID": "d7"}
    pod_id = create(fake, name="eps-s-2", env={"PUBLIC_KEY": KEY_LINE})
    assert fake.env_of(pod_id) == {"PUBLIC_KEY": KEY_LINE}


def test_start_ssh_injects_the_accounts_keys(fake: FakeRunpod) -> None:
    with httpx.Client(base_url=fake.url, headers=AUTH, timeout=5) as http:
        assert http.get("/v2/account/ssh-keys").json() == {"keys": []}
        without = http.post("/v2/pods", json={**BODY, "startSsh": True}).json()
        assert http.put("/v2/account/ssh-keys", json={"keys": [KEY_LINE]}).json() == {"keys": [KEY_LINE]}
        bad = http.put("/v2/account/ssh-keys", json={"keys": ["not a key"]})
        injected = http.post("/v2/pods", json={**BODY, "name": "eps-s-2", "startSsh": True}).json()
        own = http.post("/v2/pods", json={**BODY, "name": "eps-s-3", "startSsh": True, "env": {"PUBLIC_KEY": "x"}})
        plain = http.post("/v2/pods", json={**BODY, "name": "eps-s-4"}).json()
    assert without["env"] == {}  # "with none registered the flag does nothing"
    assert bad.status_code == 422
    assert injected["env"] == {"PUBLIC_KEY": KEY_LINE}
    assert own.json()["env"] == {"PUBLIC_KEY": "x"}  # "unless the request already sets one"
    assert plain["env"] == {}
    assert "startSsh" not in injected  # "never returned by GET"


def test_eps_reads_a_pod_that_carries_an_address(fake: FakeRunpod, sleeper: SleepRecorder) -> None:
    pod_id = fake.add_pod({**BODY, "ports": ["22/tcp"]})

    with RunpodClient(ApiKey(KEY), fast_settings(fake.url), sleep=sleeper) as c:
        _result = c.get_pod(pod_id)
    pod = _result
    assert isinstance(pod, Success)
    assert pod.unwrap().status is PodStatus.RUNNING
