"""Issue 35 item 3: intents in the config.  ``[intents.NAME]`` defines a team's own intent or
changes a built-in one's numbers; it reaches ``plan()`` through the settings' policy, so the
CLI, a job file and the Python API plan it alike; ``eps intents`` says where each intent comes
from; a bad intent is one line naming the file and the path, exit 2, and nothing changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_usability import bare_env, run, valid

from eps.core.model import CapacitySnapshot, IntentSource, Job, Resource
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY, INTENTS
from eps.shell.cli.args import SUBCOMMANDS
from eps.shell.config.intents import RESERVED
from eps.shell.config.load import load_settings
from eps.shell.config.settings import ConfigError

LORA = """
[intents.lora-7b]
resource = "gpu"
gpus = 1
gpu_models = ["a100-80"]
duration = "6h"
description = "LoRA fine-tuning of a 7B model"
"""


def _env(tmp_path: Path, text: str) -> dict[str, str]:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    return bare_env(tmp_path, EPS_CONFIG=str(cfg))


def _gcp(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["machine"], r["provisioning"]) for r in doc["rungs"] if r["lane"] == "gcp"]


# --- bad intents: one line with the path, exit 2, nothing changed ------------------------------

#: (the [intents.lora-7b] table, where the line points, words it says)
BAD: list[tuple[str, str, str]] = [
    ('resource = "gpu"\ngpus = 1\ncolour = "red"', "$.intents.lora-7b", "extra fields found (colour)"),
    ('resource = "gpu"\ngpus = "2"', "$.intents.lora-7b.gpus", "expected int"),
    ('resource = "gpu"\ngpus = 1.5', "$.intents.lora-7b.gpus", "expected int"),
    ('resource = "gpu"\ngpus = 0', "$.intents.lora-7b.gpus", "at least 1"),
    ('resource = "gpu"\ngpus = -2', "$.intents.lora-7b.gpus", "at least 1"),
    ('resource = "gpu"', "$.intents.lora-7b.gpus", "how many GPUs"),
    ('resource = "gpu"\ngpus = 1\ngpu_models = ["h100", "a100"]', "$.intents.lora-7b.gpu_models[1]",
     "unknown GPU 'a100'"),
    ('resource = "gpu"\ngpus = 1\ngpu_models = "h100"', "$.intents.lora-7b.gpu_models", "expected list[str]"),
    ('resource = "gpu"\ngpus = 1\ngpu_models = ["l4"]\ngpu_mem_gb = 40', "$.intents.lora-7b.gpu_mem_gb", "no such GPU"),
    ('resource = "gpu"\ngpus = 1\ngpu_mem_gb = 5000', "$.intents.lora-7b.gpu_mem_gb", "at most 1024"),
    ('resource = "gpu"\ngpus = 1\ngcp_machine = "e2-standard-4"', "$.intents.lora-7b.gcp_machine", "for a CPU intent"),
    ('resource = "cpu"\ngpu_mem_gb = 24', "$.intents.lora-7b.gpu_mem_gb", "holds no GPU (P1)"),
    ('resource = "cpu"\ngpus = 1', "$.intents.lora-7b.gpus", "holds no GPU (P1)"),
    ('resource = "cpu"\nvcpus = 64', "$.intents.lora-7b.vcpus", "no GCP CPU machine type"),
    ('resource = "cpu"\nvcpus = 16\ngcp_machine = "e2-standard-4"', "$.intents.lora-7b.gcp_machine", "does not hold"),
    ('resource = "cpu"\ngcp_machine = "a2-ultragpu-1g"', "$.intents.lora-7b.gcp_machine", "not a GCP CPU machine"),
    ('resource = "cpu"\nrunpod_cpu = ["cpu9x"]', "$.intents.lora-7b.runpod_cpu[0]", "unknown RunPod CPU flavor"),
    ('resource = "gpu"\ngpus = 1\nduration = "forever"', "$.intents.lora-7b.duration", "bad duration"),
    ('resource = "gpu"\ngpus = 1\nduration = 0', "$.intents.lora-7b.duration", "must be positive"),
    ('resource = "gpu"\ngpus = 1\ndescription = ""', "$.intents.lora-7b.description", "one line"),
    ('resource = "tpu"', "$.intents.lora-7b.resource", 'resource is "cpu" or "gpu"'),
    ("gpus = 1", "$.intents.lora-7b.resource", "a new intent says its resource"),
]


@pytest.mark.parametrize(("table", "where", "words"), BAD, ids=[w + ":" + t.split("\n")[-1] for t, w, _ in BAD])
def test_a_bad_intent_is_one_line_naming_the_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, table: str, where: str, words: str
) -> None:
    env = _env(tmp_path, f"[intents.lora-7b]\n{table}\n")
    for argv in (["plan", "lora-7b"], ["execute", "lora-7b", "--", "true"], ["intents"]):
        rc, out, err = run(capsys, argv, env)
        assert rc == 2, (argv, err)
        assert out == ""
        [line] = err.splitlines()
        assert line.startswith(f"eps: error: {env['EPS_CONFIG']}: ") and line.endswith(f"@ {where}"), line
        assert words in line, line
        assert "Traceback" not in err
    rc, out, err = run(capsys, ["plan", "lora-7b", "--json"], env)
    said = json.loads(err)
    assert rc == 2 and out == "" and said["error"]["code"] == "bad_file"
    assert said["error"]["text"] == line.removeprefix("eps: error: ")
    assert not (tmp_path / "state").exists()  # nothing recorded, nothing called


#: (the config, where the line points, words it says): names and tables eps refuses
BAD_NAMES: list[tuple[str, str, str]] = [
    ('[intents.status]\nresource = "cpu"\n', "$.intents.status", "an eps command"),
    ('[intents.execute]\nresource = "cpu"\n', "$.intents.execute", "an eps command"),
    ('[intents."Lora 7B"]\nresource = "cpu"\n', "$.intents['Lora 7B']", "an intent's name"),
    ('[intents.-x]\nresource = "cpu"\n', "$.intents['-x']", "an intent's name"),
    ('[intents.cpu-small]\nresource = "gpu"\ngpus = 1\n', "$.intents.cpu-small.resource", "its resource stays"),
    ("[intents]\nlora-7b = 3\n", "$.intents.lora-7b", "expected IntentDoc"),
    ("intents = 3\n", "$.intents", "expected a mapping"),
]


@pytest.mark.parametrize(("text", "where", "words"), BAD_NAMES, ids=[w for _, w, _ in BAD_NAMES])
def test_a_name_eps_uses_or_that_is_not_a_simple_name_is_refused(tmp_path: Path, text: str, where: str,
                                                                 words: str) -> None:  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        load_settings(_env(tmp_path, text))
    said = str(caught.value)
    assert "\n" not in said and f"@ {where}" in said and words in said, said


def test_every_subcommand_is_a_reserved_name() -> None:
    assert set(SUBCOMMANDS) <= RESERVED


# --- a config intent plans, at every door ------------------------------------------------------


def test_a_config_intent_plans_with_its_numbers_and_default_duration(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = _env(tmp_path, LORA)
    rc, out, _ = run(capsys, ["plan", "lora-7b", "--json"], env)
    doc = json.loads(out)
    valid(doc, "plan")
    assert rc == 0 and doc["job"]["duration_s"] == 6 * 3600  # the intent's default duration
    # a100-80 only, and 6 h is long and not restartable: on-demand only (P11)
    assert set(_gcp(doc)) == {("a2-ultragpu-1g", "on-demand")}
    assert not [r for r in doc["rungs"] if r["lane"] == "fellows"]  # fellows has H200s, not A100s
    rc, out, _ = run(capsys, ["plan", "lora-7b", "--duration", "1h", "--json"], env)
    doc = json.loads(out)
    assert doc["job"]["duration_s"] == 3600  # --duration wins
    assert next(p for _, p in _gcp(doc)) == "spot"  # short: spot first (P11)
    rc, out, _ = run(capsys, ["plan", "lora-7b"], env)
    assert rc == 0 and out.startswith("lora-7b  (gpu, 6h)")


def test_a_job_file_and_the_python_api_plan_a_config_intent_as_the_cli_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import eps

    env = _env(tmp_path, LORA)
    rc, out, _ = run(capsys, ["plan", "lora-7b", "--json"], env)
    cli = json.loads(out)
    (tmp_path / "job.toml").write_text('intent = "lora-7b"\ncommand = ["python", "train.py"]\n')
    rc, out, err = run(capsys, ["plan", "--job", str(tmp_path / "job.toml"), "--json"], env)
    assert rc == 0, err
    assert json.loads(out)["rungs"] == cli["rungs"]
    api = eps.plan(eps.Job(intent="lora-7b", settings_env=env), env=env).to_dict()
    assert api["rungs"] == cli["rungs"] and api["job"]["duration_s"] == 6 * 3600


def test_eps_intents_says_where_each_intent_comes_from(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env = _env(tmp_path, LORA + "\n[intents.cpu-small]\nvcpus = 8\n")
    rc, out, _ = run(capsys, ["intents", "--json"], env)
    assert rc == 0
    doc = json.loads(out)
    valid(doc, "intents")
    source = {i["name"]: i["source"] for i in doc["intents"]}
    assert source == {**{i.name: "built-in" for i in INTENTS}, "cpu-small": "override", "lora-7b": "config"}
    assert list(source) == [*(i.name for i in INTENTS), "lora-7b"]  # the built-ins first, in their order
    small = next(i for i in doc["intents"] if i["name"] == "cpu-small")
    assert (small["vcpus"], small["mem_gb"], small["gcp_machine"]) == (8, 16, "e2-standard-8")
    lora = next(i for i in doc["intents"] if i["name"] == "lora-7b")
    assert (lora["gpus"], lora["gpu_models"], lora["gcp_gpu_machines"], lora["duration_s"]) == (
        1, ["a100-80"], ["a2-ultragpu-1g"], 21600)  # fmt: skip
    _, out, _ = run(capsys, ["intents", "--wide"], env)
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "config (overrides built-in)" in rows["cpu-small"]
    assert "config; 6h when a job gives no --duration" in rows["lora-7b"]
    assert "built-in" in rows["gpu-1"] and "config" not in rows["gpu-1"]
    (tmp_path / "fresh").mkdir()
    _rc, out, _ = run(capsys, ["intents", "--json"], bare_env(tmp_path / "fresh"))
    assert {i["source"] for i in json.loads(out)["intents"]} == {"built-in"}  # no config: the tables


def test_naming_gpu_models_drops_the_default_least_memory_as_a_jobs_gpu_does(tmp_path: Path) -> None:
    text = '[intents.eval-l4]\nresource = "gpu"\ngpus = 1\ngpu_models = ["l4"]\n'
    policy = load_settings(_env(tmp_path, text)).policy
    it = policy.intent("eval-l4")
    assert it is not None and (it.gpu_models, it.gpu_mem_gb) == (("l4",), 0)
    route = plan(Job(intent="eval-l4", duration_s=1800), CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy)
    assert {r.machine for r in route.rungs} == {"g2-standard-4"}  # no fellows (H200), only L4s
    new = load_settings(_env(tmp_path, '[intents.big]\nresource = "gpu"\ngpus = 2\n')).policy.intent("big")
    assert new is not None and (new.gpu_mem_gb, new.vcpus, new.mem_gb, new.disk_gb) == (80, 52, 468, 300)  # as gpu-2


def test_a_new_cpu_intent_gets_the_cheapest_machine_that_holds_it(tmp_path: Path) -> None:
    policy = load_settings(_env(tmp_path, '[intents.sort-big]\nresource = "cpu"\nvcpus = 8\nmem_gb = 60\n')).policy
    it = policy.intent("sort-big")
    assert it is not None and it.source is IntentSource.CONFIG and it.resource is Resource.CPU
    assert (it.gcp_machine, it.runpod_cpu, it.gpus) == ("e2-standard-16", ("cpu3m", "cpu5m"), 0)
    route = plan(Job(intent="sort-big", duration_s=1800), CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy)
    assert next(r.machine for r in route.rungs if r.lane == "gcp") == "e2-standard-16"
    assert all(r.gpus == 0 for r in route.rungs)  # P1


# --- properties --------------------------------------------------------------------------------


def _same_numbers(name: str) -> str:
    it = next(i for i in INTENTS if i.name == name)
    lines = [f"[intents.{name}]", f"vcpus = {it.vcpus}", f"mem_gb = {it.mem_gb}"]
    if it.resource is Resource.GPU:
        lines += [f"gpus = {it.gpus}", f"gpu_mem_gb = {it.gpu_mem_gb}", f"disk_gb = {it.disk_gb}",
                  f"gpu_models = {json.dumps(list(it.gpu_models))}"]  # fmt: skip
    else:
        lines += [f'gcp_machine = "{it.gcp_machine}"', f"runpod_cpu = {json.dumps(list(it.runpod_cpu))}"]
    return "\n".join(lines) + "\n"


_OVERRIDES = {i.name: _same_numbers(i.name) for i in INTENTS}


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from([i.name for i in INTENTS]),
    duration=st.one_of(st.none(), st.integers(1, 14 * 86_400)),
    restartable=st.booleans(),
    footprint=st.sampled_from([0.0, 10.0, 80.0]),
    pin=st.sampled_from([None, "gcp", "runpod", "fellows"]),
)
def test_an_override_with_the_built_in_numbers_plans_as_the_built_in(
    tmp_path_factory: pytest.TempPathFactory, name: str, duration: int | None, restartable: bool, footprint: float,
    pin: str | None,
) -> None:  # fmt: skip
    tmp = tmp_path_factory.mktemp("same")
    policy = load_settings(_env(tmp, _OVERRIDES[name])).policy
    it = policy.intent(name)
    assert it is not None and it.source is IntentSource.OVERRIDE
    assert it._replace(source=IntentSource.BUILT_IN) == DEFAULT_POLICY.intent(name)
    job = Job(intent=name, duration_s=duration, restartable=restartable, footprint_gb=footprint, pin=pin)

    def route(p: Any) -> Any:
        try:
            return plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=p)
        except ValueError as exc:
            return ("refused", str(exc))

    assert route(policy) == route(DEFAULT_POLICY)
