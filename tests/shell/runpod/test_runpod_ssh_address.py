"""RunPod pods report where ssh reaches them, the way the API document shapes it, and keep
the ``env`` they were created with (``PUBLIC_KEY`` for sshd).

The ``Pod`` schema has no ``publicIp``/``portMappings`` (those are the retired REST v1 /
GraphQL names): the address is ``ssh.direct`` (``{host, port, username, command}``, only
when ``ports`` has ``22/tcp`` and the pod is RUNNING) and ``runtime.ports``
(``{private, public, type, ip}``).  ``public_ip`` and ``ssh_port`` are the fake's knobs."""

from __future__ import annotations

import json
from pathlib import Path
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


# --- what eps sends and reads (issue 12: ssh plumbing, CUDA versions) ----------------------

CREATE = schema_validator("CreatePodRequest")


def test_a_public_key_asks_for_sshd_and_22_tcp() -> None:
    from runpod_testkit import gpu_rung

    from eps.shell.lanes.runpod.wire import RunpodSettings, pod_request

    body = pod_request(cpu_rung(), "eps-k-1", RunpodSettings(), dispatch_id="dk", public_key=KEY_LINE + "\n")
    assert isinstance(body, dict)
    assert body["env"] == {"EPS_POD_NAME": "eps-k-1", "EPS_DISPATCH_ID": "dk", "PUBLIC_KEY": KEY_LINE}
    assert body["ports"] == ["22/tcp"]
    assert list(CREATE.iter_errors(body)) == []
    gpu = pod_request(gpu_rung(), "eps-k-2", RunpodSettings(), public_key=KEY_LINE)
    assert isinstance(gpu, dict) and list(CREATE.iter_errors(gpu)) == []
    plain = pod_request(cpu_rung(), "eps-k-3", RunpodSettings())
    assert isinstance(plain, dict) and "ports" not in plain and "PUBLIC_KEY" not in plain["env"]


def test_a_bad_public_key_is_refused_before_any_call() -> None:
    from eps.core.outcome import FailureKind, LaneFailure
    from eps.shell.lanes.runpod.wire import RunpodSettings, pod_request

    for bad in ("not a key", KEY_LINE + "\nssh-rsa AAAA other"):
        refused = pod_request(cpu_rung(), "eps-k-4", RunpodSettings(), public_key=bad)
        assert isinstance(refused, LaneFailure) and refused.kind is FailureKind.INVALID_REQUEST


#: Two more hosts' public keys, and what a host might have registered that is not one
#: (``hosts.public_key`` is whatever a host's eps wrote there).
KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEpsHostB eps@host-b"
KEY_C = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= eps@host-c"
PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----"
SMUGGLED = f"{KEY_B}\nssh-rsa AAAAsmuggled x"


def test_the_pod_lets_in_every_registered_key_and_no_private_key(
    fake: FakeRunpod, sleeper: SleepRecorder, pg_url: str, tmp_path: Path
) -> None:
    """On a shared ledger, ``PUBLIC_KEY`` is eps's own key and then every key the team's other
    hosts registered (read by ``team.team_keys``, as for GCP VMs), one a line, as RunPod's
    images write it into authorized_keys; a registered value that is not one OpenSSH public key
    line (a private key, two lines) is never sent."""
    from eps.shell.state.ledger import Ledger
    from eps.shell.state.team import register, team_keys

    registered = {"host-a": KEY_LINE, "host-b": KEY_B, "host-c": KEY_C, "host-d": PRIVATE, "host-e": SMUGGLED,
                  "host-f": KEY_LINE + "\n"}  # fmt: skip
    for host, key in registered.items():
        ledger = Ledger(str(tmp_path / host), url=pg_url, host=host)
        register(ledger, key)
        ledger.close()
    ledger = Ledger(str(tmp_path / "host-a"), url=pg_url, host="host-a")
    keys = team_keys(ledger)  # every other host's row, as registered
    ledger.close()
    assert sorted(keys) == sorted([KEY_B, KEY_C, PRIVATE, SMUGGLED, KEY_LINE + "\n"]), keys
    job = Job("cpu-small", 600, command=("python", "run.py"))
    with RunpodClient(ApiKey(KEY), fast_settings(fake.url), sleep=sleeper) as c:
        made = c.start(cpu_rung(), "eps-t-1", job=job, dispatch_id="dt", public_key=KEY_LINE, also_keys=keys)
        pod = made.result.unwrap()
    assert fake.env_of(pod.id)["PUBLIC_KEY"].split("\n") == [KEY_LINE, KEY_B, KEY_C]
    [body] = fake.created_bodies()
    assert body["ports"] == ["22/tcp"] and list(CREATE.iter_errors(body)) == []
    sent = json.dumps(body)
    assert "PRIVATE KEY" not in sent and "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU" not in sent and "smuggled" not in sent


def test_team_keys_are_checked_one_line_each_and_never_stand_for_eps_own() -> None:
    from eps.core.outcome import LaneFailure
    from eps.shell.lanes.runpod.wire import RunpodSettings, pod_request

    given = (" " + KEY_B + "\n", "", "not a key", 'command="sh" ' + KEY_C, KEY_C, KEY_B)
    body = pod_request(cpu_rung(), "eps-t-2", RunpodSettings(), public_key=KEY_LINE, also_keys=given)
    assert isinstance(body, dict) and body["env"]["PUBLIC_KEY"] == f"{KEY_LINE}\n{KEY_B}\n{KEY_C}"
    alone = pod_request(cpu_rung(), "eps-t-3", RunpodSettings(), public_key=KEY_LINE, also_keys=(PRIVATE,))
    assert isinstance(alone, dict) and alone["env"]["PUBLIC_KEY"] == KEY_LINE
    none = pod_request(cpu_rung(), "eps-t-4", RunpodSettings(), also_keys=(KEY_B,))  # no key of eps's: no sshd
    assert isinstance(none, dict) and "PUBLIC_KEY" not in none["env"] and "ports" not in none
    bad_own = pod_request(cpu_rung(), "eps-t-5", RunpodSettings(), public_key=PRIVATE, also_keys=(KEY_B,))
    assert isinstance(bad_own, LaneFailure)  # eps's own key must be one: the job fails before any call


def test_the_test_server_lets_a_pods_keys_in_as_its_image_does(tmp_path: Path) -> None:
    """The RunPod test server, given the sshd's authorized_keys, does what RunPod's images'
    start script does (``echo "$PUBLIC_KEY" >> ~/.ssh/authorized_keys``): every line of a
    RUNNING pod's ``PUBLIC_KEY`` is let in; a terminated pod takes back what it added, but
    not a line that was there before or that a live pod holds too."""
    keys = tmp_path / "authorized_keys"
    keys.write_text(KEY_LINE + "\n")  # there before: never taken away
    with FakeRunpod(api_key=KEY, gets_to_running=1, authorized_keys=keys) as server:
        both = create(server, ports=["22/tcp"], env={"PUBLIC_KEY": f"{KEY_LINE}\n{KEY_B}\n{KEY_C}"})
        assert keys.read_text() == KEY_LINE + "\n"  # PROVISIONING: the image has not started
        assert get(server, both)["status"] == "RUNNING"
        assert keys.read_text().splitlines() == [KEY_LINE, KEY_B, KEY_C]
        one = create(server, ports=["22/tcp"], env={"PUBLIC_KEY": KEY_C})
        get(server, one)
        ended = httpx.post(f"{server.url}/v2/pods/{both}/action", json={"action": "terminate"}, headers=AUTH)
        assert ended.status_code == 204
        assert keys.read_text().splitlines() == [KEY_LINE, KEY_C]  # KEY_C: the other pod still holds it
        assert httpx.delete(f"{server.url}/v2/pods/{one}", headers=AUTH).status_code == 204
        assert keys.read_text().splitlines() == [KEY_LINE]
        left = create(server, ports=["22/tcp"], env={"PUBLIC_KEY": KEY_B})
        get(server, left)
        assert keys.read_text().splitlines() == [KEY_LINE, KEY_B]
    assert keys.read_text().splitlines() == [KEY_LINE]  # the server stopped: its pods' keys went with it


def test_gpu_pods_ask_for_the_cuda_versions_their_image_runs_on() -> None:
    from runpod_testkit import gpu_rung

    from eps.core.tables import RUNPOD_HOST_CUDA
    from eps.shell.lanes.runpod.wire import RunpodSettings, image_cuda, pod_request

    assert image_cuda("runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04") == "12.4"
    assert image_cuda("runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404") == "12.8"
    assert image_cuda("nvidia/cuda:12.6.2-base") is None  # no cuda/cu word in the tag: no constraint
    assert image_cuda("ubuntu:24.04") is None
    old = pod_request(gpu_rung(), "eps-c-1", RunpodSettings(gpu_image="runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel"))
    assert isinstance(old, dict)
    assert old["gpu"]["allowedCudaVersions"] == list(RUNPOD_HOST_CUDA)  # 12.4 and every later host
    assert list(CREATE.iter_errors(old)) == []
    new = pod_request(gpu_rung(), "eps-c-2", RunpodSettings(gpu_image="runpod/pytorch:1.0.2-cu1281-torch280"))
    assert isinstance(new, dict) and new["gpu"]["allowedCudaVersions"] == ["12.8", "12.9", "13.0"]
    other = pod_request(gpu_rung(), "eps-c-3", RunpodSettings(gpu_image="my/own:latest"))
    assert isinstance(other, dict) and "allowedCudaVersions" not in other["gpu"]
    cpu = pod_request(cpu_rung(), "eps-c-4", RunpodSettings())
    assert isinstance(cpu, dict) and "gpu" not in cpu  # CPU pods carry no CUDA constraint


def test_the_pods_ssh_address_is_read_from_ssh_direct(fake: FakeRunpod, sleeper: SleepRecorder) -> None:
    job = Job("cpu-small", 600, command=("python", "run.py"))
    with RunpodClient(ApiKey(KEY), fast_settings(fake.url), sleep=sleeper) as c:
        started = c.start(cpu_rung(), "eps-a-1", job=job, dispatch_id="da", public_key=KEY_LINE).result.unwrap()
        assert c.address(started.id) == Success(("127.0.0.1", 40000))
        assert fake.env_of(started.id)["PUBLIC_KEY"] == KEY_LINE
        without = c.start(cpu_rung(), "eps-a-2", job=job, dispatch_id="da").result.unwrap()
        failure = c.address(without.id).failure()
        assert failure.code == "no_ssh_address" and "22/tcp" in failure.message


def test_the_address_follows_the_fakes_knobs(sleeper: SleepRecorder) -> None:
    with (
        FakeRunpod(api_key=KEY, public_ip="192.0.2.9", ssh_port=2200) as other,
        RunpodClient(ApiKey(KEY), fast_settings(other.url), sleep=sleeper) as c,
    ):
        made = c.create_pod(cpu_rung(), "eps-a-3", public_key=KEY_LINE).unwrap()
        assert c.address(made.id).failure().code == "no_ssh_address"  # not running yet
        c.get_pod(made.id)
        assert c.address(made.id) == Success(("192.0.2.9", 2200))
