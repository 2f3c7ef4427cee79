"""sbatch renders: syrupy snapshots, hostile-string properties, the cluster's hard rules (issue 31), and P13."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from syrupy.extensions.amber.serializer import AmberDataSerializer

from eps.core.model import CapacitySnapshot, ClusterConfig, Job, LaneKind, Provisioning, QosGrants, Rung, evolve
from eps.core.router import plan
from eps.core.sbatch import SbatchRenderError, quote_arg, render_sbatch
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY, FELLOWS

#: A second SLURM cluster, defined here, with no QoS ladder (renders never name a QoS).
LAB = ClusterConfig(name="lab", partition="batch", account=None, qos_ladder=(), gpus_per_node=4, gpu_model="A100")

#: The cluster user fellows' renders carry (its job names, its HF_TOKEN_PATH).
USER = "jdoe"

TRAIN = Job(intent="gpu-2", duration_s=3 * 3600, command=("python", "train.py", "--lr", "3e-4", "--name", "run 1"))


def slurm_rung(cluster: ClusterConfig, qos: str | None, gpus: int) -> Rung:
    return Rung(cluster.name, LaneKind.SLURM, Provisioning.QUEUE, "test", qos=qos, gpus=gpus, machine=f"{gpus}xGPU")


# --- snapshots ------------------------------------------------------------------------------


@pytest.mark.parametrize("qos", ["high-eur", "normal-eur", "low-eur", "dev-eur"])
def test_fellows_tier(snapshot, qos: str) -> None:
    script = render_sbatch(
        TRAIN, FELLOWS, slurm_rung(FELLOWS, qos, 2), dispatch_id="d0001", user=USER, output="eps-%j.out"
    )
    assert script == snapshot


#: Fellows as the seed project ran it: low-eur on another partition (and account) than the other tiers.
SPLIT = evolve(FELLOWS, tier_partitions=(("low-eur", "general,overflow"),), tier_accounts=(("low-eur", "fellows-low"),))


def test_a_tier_with_its_own_partition_and_account(snapshot) -> None:
    rung = slurm_rung(SPLIT, "low-eur", 2)
    script = render_sbatch(TRAIN, SPLIT, rung, dispatch_id="d0001", user=USER, output="eps-%j.out")
    assert "#SBATCH --partition=general,overflow\n" in script and "#SBATCH --account=fellows-low\n" in script
    assert script == snapshot


@pytest.mark.parametrize("qos", ["high-eur", "normal-eur", "dev-eur", None])
def test_every_other_tier_renders_byte_for_byte_as_before(qos: str | None) -> None:
    """P13: a tier's own partition changes only that tier's render."""
    rung = slurm_rung(SPLIT, qos, 2)
    split, plain = (render_sbatch(TRAIN, c, rung, dispatch_id="d0001", user=USER) for c in (SPLIT, FELLOWS))
    assert split == plain


def test_no_ladder_cluster(snapshot) -> None:
    script = render_sbatch(TRAIN, LAB, slurm_rung(LAB, None, 2), dispatch_id="d0002", output="eps-%j.out")
    assert "--qos" not in script
    assert script == snapshot


def test_cpu_job(snapshot) -> None:
    job = Job(intent="cpu-small", duration_s=90, command=("bash", "-c", "echo $HOME; ls | wc -l"))
    script = render_sbatch(job, FELLOWS, slurm_rung(FELLOWS, "low-eur", 0), dispatch_id="cpu1", user=USER)
    assert "--gres" not in script
    assert script == snapshot


def test_multi_gpu_job(snapshot) -> None:
    job = Job(intent="gpu-8", duration_s=6 * 86_400 + 1, command=("torchrun", "--nproc-per-node=8", "fit.py"))
    rung = slurm_rung(FELLOWS, "high-eur", 8)
    script = render_sbatch(job, FELLOWS, rung, dispatch_id="big8", user=USER, output="/s/%x.%j")
    assert "#SBATCH --gres=gpu:8\n" in script
    assert "#SBATCH --time=6-00:01:00\n" in script  # rounded up to the next minute
    assert script == snapshot


def test_env_is_exported_quoted(snapshot) -> None:
    env = {"HF_HOME": "/data/hf cache", "EPS_NOTE": "it's $(not) run"}
    script = render_sbatch(TRAIN, LAB, slurm_rung(LAB, None, 1), dispatch_id="env", env=env)
    assert script == snapshot


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dispatch_id": "a\n#SBATCH --qos=high-eur"}, "dispatch id"),
        ({"dispatch_id": ""}, "dispatch id"),
        ({"dispatch_id": "okay", "output": "out file"}, "--output"),
        ({"dispatch_id": "okay", "output": "x\nrm -rf /"}, "--output"),
        ({"dispatch_id": "okay", "env": {"BAD NAME": "v"}}, "environment name"),
    ],
)
def test_refuses_unsafe_values(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(SbatchRenderError) as exc:
        render_sbatch(TRAIN, FELLOWS, slurm_rung(FELLOWS, "high-eur", 2), user=USER, **kwargs)  # type: ignore[arg-type]
    assert exc.value.field == field


def test_refuses_hostile_cluster_values() -> None:
    bad = evolve(FELLOWS, account="fellows\n#SBATCH --qos=dev-eur")
    with pytest.raises(SbatchRenderError, match="--account"):
        render_sbatch(TRAIN, bad, slurm_rung(bad, "high-eur", 2), dispatch_id="xyz", user=USER)


def test_refuses_empty_command_bad_duration_and_foreign_rung() -> None:
    rung = slurm_rung(FELLOWS, "high-eur", 2)
    with pytest.raises(SbatchRenderError, match="command"):
        render_sbatch(evolve(TRAIN, command=()), FELLOWS, rung, dispatch_id="xyz", user=USER)
    with pytest.raises(SbatchRenderError, match="duration"):
        render_sbatch(evolve(TRAIN, duration_s=0), FELLOWS, rung, dispatch_id="xyz", user=USER)
    with pytest.raises(SbatchRenderError, match="rung"):
        render_sbatch(TRAIN, LAB, rung, dispatch_id="xyz", user=USER)
    with pytest.raises(SbatchRenderError, match="NUL"):
        render_sbatch(evolve(TRAIN, command=("a\x00b",)), FELLOWS, rung, dispatch_id="xyz", user=USER)


# --- hostile strings: the command is exactly the given argv, on one line ----------------------

NASTY = [
    "'",
    '"',
    "\\",
    "$(touch /tmp/pwned)",
    "`id`",
    "; rm -rf /",
    "\n#SBATCH --qos=dev-eur",
    "a\nb",
    "\r",
    "$'\\n'",
    "#",
    "-",
    "--",
    "",
    " ",
    "*",
    "~",
    "!!",
    "${IFS}",
    "\x7f\x1b[31m",
    "é ü 日本",
    "\u2028",
]
hostile = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20),
)


def _run_bash(script: str, tmp: Path) -> bytes:
    path = tmp / "job.sh"
    path.write_text(script, encoding="utf-8")
    subprocess.run(["bash", "-n", str(path)], check=True)
    return subprocess.run(["bash", str(path)], check=True, capture_output=True).stdout


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(hostile, min_size=1, max_size=5), value=hostile)
def test_hostile_argv_and_env_round_trip(tmp_path: Path, args: list[str], value: str) -> None:
    argv = ("printf", "%s\\0", *args)
    job = evolve(TRAIN, command=argv)
    script = render_sbatch(job, LAB, slurm_rung(LAB, None, 1), dispatch_id="hhh", env={"EPS_V": value})
    lines = script.split("\n")
    # shebang, five #SBATCH lines (no-requeue, job-name, gres, time, partition), one export, the command, "".
    assert len(lines) == 9
    assert lines[-1] == ""
    assert all(line.startswith("#SBATCH --") for line in lines[1:6])
    assert lines[6].startswith("export EPS_V=")
    out = _run_bash(script, tmp_path)
    assert out.split(b"\0")[:-1] == [a.encode() for a in args]
    env_out = _run_bash(script.replace(lines[7], 'printf "%s" "$EPS_V"'), tmp_path)
    assert env_out == value.encode()
    if not any(ord(c) < 0x20 or c == "\x7f" for c in "".join(args)):
        assert tuple(shlex.split(lines[7])) == argv


@given(dispatch_id=hostile, output=hostile)
def test_hostile_sbatch_values_are_refused_or_stay_one_line(dispatch_id: str, output: str) -> None:
    rung = slurm_rung(FELLOWS, "high-eur", 2)
    try:
        script = render_sbatch(TRAIN, FELLOWS, rung, dispatch_id=dispatch_id, user=USER, output=output)
    except SbatchRenderError as exc:
        assert exc.field in ("dispatch id", "--job-name", "--output")
        return
    plain = render_sbatch(TRAIN, FELLOWS, rung, dispatch_id="d0001", user=USER, output="eps-%j.out").split("\n")
    lines = script.split("\n")
    assert len(lines) == len(plain)  # shebang, 9 #SBATCH lines, 4 exports, the trap, the command, wait, ""
    options = [i for i, line in enumerate(plain) if line.startswith("#SBATCH")]
    assert len(options) == 9
    for i in options:
        assert lines[i].startswith("#SBATCH --")
        assert len(lines[i].split()) == 2  # sbatch splits on blanks: one option per line, nothing more
    assert [line for i, line in enumerate(lines) if i not in options] == [
        line for i, line in enumerate(plain) if i not in options
    ]


def test_quote_arg_uses_ansi_c_only_for_control_characters() -> None:
    assert quote_arg("plain") == "plain"
    assert quote_arg("it's") == "'it'\"'\"'s'"
    assert quote_arg("a\nb'c\\") == "$'a\\x0ab\\'c\\\\'"


# --- P13 ------------------------------------------------------------------------------------

ladders = st.lists(st.sampled_from(["high-eur", "normal-eur", "low-eur", "dev-eur", "x"]), unique=True, max_size=4)


def _lab_render(fellows: ClusterConfig, lab: ClusterConfig) -> str:
    """Plan a gpu-1 job on a policy holding ``lab`` (first) and ``fellows``; render lab's rung."""
    policy = evolve(DEFAULT_POLICY, clusters=(fellows, lab), gpu_lane_order=("lab", "fellows", "gcp"))
    job = Job(intent="gpu-1", duration_s=3600, command=("python", "eval.py"))
    rung = plan(job, CapacitySnapshot(), QosGrants(DEFAULT_GRANTS.clusters), None, policy=policy).rungs[0]
    assert rung.lane == "lab"
    assert rung.qos is None
    return render_sbatch(job, lab, rung, dispatch_id="p13", output="eps-%j.out")


@given(
    ladder=ladders,
    dev_qos=st.sampled_from([None, "dev-eur", "x"]),
    dev_for_debug=st.booleans(),
    first=st.integers(1, 10_000),
    nxt=st.integers(1, 10_000),
    self_cap=st.booleans(),
)
def test_p13_no_ladder_render_is_byte_identical_whatever_the_ladder(
    ladder: list[str], dev_qos: str | None, dev_for_debug: bool, first: int, nxt: int, self_cap: bool
) -> None:
    """P13: renders for a cluster without a QoS ladder stay byte-identical when the ladder changes.

    Changes fellows' ladder (tiers, dev QoS, park caps, early-advance switch) and the
    no-ladder cluster's own ladder-related settings; lab's render never moves."""
    baseline = _lab_render(FELLOWS, LAB)
    changed_fellows = evolve(
        FELLOWS,
        qos_ladder=tuple(ladder),
        dev_qos=dev_qos,
        dev_qos_for_debug=dev_for_debug,
        first_park_cap_s=first,
        next_park_cap_s=nxt,
        advance_on_self_cap=self_cap,
    )
    changed_lab = evolve(
        LAB,
        dev_qos=dev_qos,
        dev_qos_for_debug=dev_for_debug,
        first_park_cap_s=first,
        next_park_cap_s=nxt,
        advance_on_self_cap=self_cap,
    )
    assert _lab_render(changed_fellows, LAB) == baseline
    assert _lab_render(changed_fellows, changed_lab) == baseline


def test_p13_no_ladder_render_snapshot(snapshot) -> None:
    """P13: the no-ladder cluster's render, pinned by a snapshot, is the one the plan produces."""
    assert _lab_render(FELLOWS, LAB) == snapshot


# --- fellows as the cluster really is (issue 31) -------------------------------------------------

GPU4 = Job(intent="gpu-4", duration_s=5 * 3600, command=("python", "-m", "vllm.entrypoints.api_server"))


def _fellows_gpu4(qos: str) -> tuple[Rung, str]:
    """The planned fellows rung of a gpu-4 job under ``qos`` and its render."""
    rungs = plan(GPU4, CapacitySnapshot(), DEFAULT_GRANTS, None).rungs
    rung = next(r for r in rungs if r.lane == "fellows" and r.qos == qos)
    return rung, render_sbatch(GPU4, FELLOWS, rung, dispatch_id="gpu4", user=USER, output="eps-%j.out")


def _body(script: str) -> list[str]:
    """The script's lines after its ``#SBATCH`` options (what bash runs; lines as bash splits them)."""
    lines = script.split("\n")[:-1]
    last = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    return lines[last + 1 :]


FELLOWS_EXPORTS = [
    "export HF_HOME=/workspace-vast/pretrained_ckpts",
    f"export HF_TOKEN_PATH=/workspace-vast/{USER}/.cache/huggingface/token",
    "export NCCL_NVLS_ENABLE=0",
    "export NCCL_SOCKET_IFNAME=vxlan0",
]


def test_fellows_gpu4_high_eur(snapshot) -> None:
    """Issue 31: partition general, no --account, 128 GB and 16 CPUs per GPU, the environment
    (shared caches, NCCL) in the body, the user in the job name, the cleanup trap."""
    rung, script = _fellows_gpu4("high-eur")
    assert (rung.mem_gb, rung.vcpus) == (512, 64)  # the rung says what the render asks for
    assert "#SBATCH --partition=general\n" in script
    assert "--account" not in script
    assert "#SBATCH --mem=512G\n" in script
    assert "#SBATCH --cpus-per-task=64\n" in script
    assert f"#SBATCH --job-name=eps-gpu4-{USER}\n" in script
    body = _body(script)
    assert body[: len(FELLOWS_EXPORTS)] == FELLOWS_EXPORTS
    assert body[len(FELLOWS_EXPORTS)].startswith("trap ")
    assert body[-2:] == ["python -m vllm.entrypoints.api_server &", "wait $!"]
    assert "--export" not in script and "CUDA_VISIBLE_DEVICES" not in script
    assert script == snapshot


def test_fellows_gpu4_low_eur(snapshot) -> None:
    """Issue 31: low-eur goes to general,overflow; everything else as under high-eur."""
    _, script = _fellows_gpu4("low-eur")
    _, high = _fellows_gpu4("high-eur")
    assert "#SBATCH --partition=general,overflow\n" in script
    assert "--account" not in script
    assert script.replace("low-eur", "high-eur").replace("general,overflow", "general") == high
    assert script == snapshot


def test_fellows_mem_is_128_gb_a_gpu_up_to_1800_and_cpus_16_a_gpu_up_to_128() -> None:
    """The original's ``--mem = min(128 x GPUs, 1800)`` GB; a CPU-only job gets one GPU's worth."""
    assert [FELLOWS.resources(g) for g in (0, 1, 2, 4, 8, 14, 16)] == [
        (128, 16), (128, 16), (256, 32), (512, 64), (1024, 128), (1792, 128), (1800, 128),
    ]  # fmt: skip
    per_gpu = FELLOWS.mem_max_per_gpu_gb
    assert per_gpu is not None and FELLOWS.mem_per_gpu_gb is not None
    assert FELLOWS.mem_per_gpu_gb <= per_gpu


def test_a_single_gpu_job_gets_no_nccl_settings() -> None:
    rung = slurm_rung(FELLOWS, "high-eur", 1)
    script = render_sbatch(evolve(TRAIN, intent="gpu-1"), FELLOWS, rung, dispatch_id="one", user=USER)
    assert [line for line in _body(script) if line.startswith("export ")] == FELLOWS_EXPORTS[:2]


def test_the_job_env_wins_over_the_rows_and_the_user_fills_its_placeholder() -> None:
    env = {"HF_HOME": "/workspace-vast/mine", "EPS_X": "1"}
    script = render_sbatch(
        TRAIN, FELLOWS, slurm_rung(FELLOWS, "normal-eur", 2), dispatch_id="envx", user="a.b", env=env
    )
    exports = [line for line in _body(script) if line.startswith("export ")]
    assert exports == [
        "export EPS_X=1",
        "export HF_HOME=/workspace-vast/mine",
        "export HF_TOKEN_PATH=/workspace-vast/a.b/.cache/huggingface/token",
        *FELLOWS_EXPORTS[2:],
    ]


@pytest.mark.parametrize("user", [None, "", "Root", "a b", "x\ny", "-rf", "a" * 33, "jdoe;id"])
def test_fellows_refuses_a_render_without_a_cluster_user(user: str | None) -> None:
    with pytest.raises(SbatchRenderError) as exc:
        render_sbatch(TRAIN, FELLOWS, slurm_rung(FELLOWS, "high-eur", 2), dispatch_id="usr1", user=user)
    assert exc.value.field == "user"


@pytest.mark.parametrize(
    "where",
    [
        {"env": {"CUDA_VISIBLE_DEVICES": "0"}},
        {"cluster": evolve(LAB, job_env=(("CUDA_VISIBLE_DEVICES", "0,1"),))},
        {"cluster": evolve(LAB, multi_gpu_env=(("CUDA_VISIBLE_DEVICES", ""),))},
    ],
)
def test_cuda_visible_devices_is_never_set(where: dict[str, object]) -> None:
    cluster = where.get("cluster", LAB)
    assert isinstance(cluster, ClusterConfig)
    with pytest.raises(SbatchRenderError, match="CUDA_VISIBLE_DEVICES") as exc:
        render_sbatch(TRAIN, cluster, slurm_rung(cluster, None, 2), dispatch_id="cvd", env=where.get("env"))  # type: ignore[arg-type]
    assert exc.value.field == "environment name"


def test_a_placeholder_without_a_user_is_refused() -> None:
    cluster = evolve(LAB, job_env=(("TOKEN", "/shared/{user}/token"),))
    with pytest.raises(SbatchRenderError, match="cluster user") as exc:
        render_sbatch(TRAIN, cluster, slurm_rung(cluster, None, 1), dispatch_id="phx")
    assert exc.value.field == "environment TOKEN"


# --- the hard rules over any row, job and tier --------------------------------------------------

TIERS = ("high-eur", "normal-eur", "low-eur", "dev-eur")
#: Never in what the render is given (a job's own command may carry them: the render does not look).
FORBIDDEN = ("--export", "CUDA_VISIBLE_DEVICES=")


def _clean(text: str) -> bool:
    return not any(f in text for f in FORBIDDEN)


slurm_words = st.from_regex(r"[a-z][a-z0-9_,-]{0,11}", fullmatch=True).filter(_clean)
env_names = st.one_of(
    st.sampled_from(["HF_HOME", "HF_TOKEN_PATH", "NCCL_NVLS_ENABLE", "NCCL_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES"]),
    st.from_regex(r"[A-Za-z0-9_]{1,8}", fullmatch=True).map(lambda s: f"EPS_T_{s}"),
)
env_values = st.tuples(hostile, st.booleans(), hostile).map(lambda t: t[0] + "{user}" * t[1] + t[2]).filter(_clean)
env_tables = st.lists(st.tuples(env_names, env_values), max_size=3).map(tuple)
#: Cluster users, valid and not, and none (a row without ``user_in_job_name`` needs none).
users = st.sampled_from([None, USER, "a.b-c", "_svc", "u1", "O'Brien", "a b", "x\ny"])
clusters = st.builds(
    ClusterConfig,
    name=st.just("c1"),
    partition=st.one_of(st.none(), slurm_words),
    account=st.one_of(st.none(), slurm_words),
    qos_ladder=st.lists(st.sampled_from(TIERS), unique=True, max_size=4).map(tuple),
    dev_qos=st.sampled_from([None, "dev-eur"]),
    tier_partitions=st.lists(st.tuples(st.sampled_from(TIERS), slurm_words), max_size=3).map(tuple),
    tier_accounts=st.lists(st.tuples(st.sampled_from(TIERS), slurm_words), max_size=3).map(tuple),
    mem_per_gpu_gb=st.one_of(st.none(), st.integers(-4, 400)),
    mem_max_gb=st.one_of(st.none(), st.integers(1, 2000)),  # the config refuses 0 and below
    mem_max_per_gpu_gb=st.one_of(st.none(), st.integers(1, 400)),
    cpus_per_gpu=st.one_of(st.none(), st.integers(-4, 64)),
    cpus_max=st.one_of(st.none(), st.integers(1, 256)),
    job_env=env_tables,
    multi_gpu_env=env_tables,
    user_in_job_name=st.booleans(),
    preemptible=st.lists(st.sampled_from(TIERS), unique=True, max_size=4).map(tuple),
    access=st.sampled_from(["full", "robot"]),
    submit_gap_s=st.floats(0, 60),
    cleanup_trap=st.booleans(),
)
render_jobs = st.builds(
    Job,
    intent=st.sampled_from(["gpu-1", "gpu-2", "gpu-8", "cpu-small", "debug"]),
    duration_s=st.integers(1, 30 * 86_400),
    command=st.lists(hostile.filter(_clean), min_size=1, max_size=4).map(tuple),
)


def _expected_env(cluster: ClusterConfig, gpus: int, user: str | None, env: dict[str, str]) -> dict[str, str]:
    pairs = [*cluster.job_env, *(cluster.multi_gpu_env if gpus > 1 else ())]
    own = {name: value.replace("{user}", user or "") for name, value in pairs}
    return {**own, **env}


def _refusals(cluster: ClusterConfig, gpus: int, user: str | None, env: dict[str, str]) -> set[str]:
    """The fields a render of these may be refused for (none: it must render)."""
    fields = set()
    if cluster.user_in_job_name and (user is None or not re.fullmatch(r"[a-z_][a-z0-9_.-]{0,31}", user)):
        fields.add("user")
    pairs = [*cluster.job_env, *(cluster.multi_gpu_env if gpus > 1 else ())]
    if user is None:
        fields |= {f"environment {name}" for name, value in pairs if "{user}" in value}
    if "CUDA_VISIBLE_DEVICES" in _expected_env(cluster, gpus, user, env):
        fields.add("environment name")
    return fields


def _env_through_bash(script: str, tmp: Path) -> dict[str, str]:
    """Run ``script`` (whose command is ``env -0``) with bash in a bare environment; what it exported."""
    path = tmp / "env.sh"
    path.write_text(script, encoding="utf-8")
    out = subprocess.run(["bash", str(path)], check=True, capture_output=True, env={"PATH": os.environ["PATH"]})
    pairs = (entry.split("=", 1) for entry in out.stdout.decode("utf-8").split("\0") if entry)
    return dict(pair for pair in pairs if len(pair) == 2)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    job=render_jobs,
    cluster=clusters,
    qos=st.one_of(st.none(), st.sampled_from(TIERS)),
    gpus=st.integers(0, 16),
    user=users,
    env=st.dictionaries(env_names, env_values, max_size=3),
    output=st.sampled_from([None, "eps-%j.out", "/s/%x.%j"]),
)
def test_no_render_breaks_the_clusters_hard_rules(
    tmp_path: Path,
    job: Job,
    cluster: ClusterConfig,
    qos: str | None,
    gpus: int,
    user: str | None,
    env: dict[str, str],
    output: str | None,
) -> None:
    """Issue 31 over any row, job and tier: no ``--export`` and no ``CUDA_VISIBLE_DEVICES=`` in
    a render; ``--mem`` never 0 and never above ``mem_max_gb``; ``--cpus-per-task`` likewise;
    the job name carries the user when the row says so; every exported value (the row's, the
    user filled in, and the job's, which win) reads back exactly through bash."""
    rung = slurm_rung(cluster, qos, gpus)
    render = functools.partial(render_sbatch, cluster=cluster, rung=rung, dispatch_id="prop1", user=user, env=env)
    refusals = _refusals(cluster, gpus, user, env)
    try:
        script = render(job, output=output)
    except SbatchRenderError as exc:
        assert exc.field in refusals, (exc.field, refusals)
        event(f"refused: {exc.field.split()[0]}")
        return
    assert not refusals
    event("rendered")

    for forbidden in FORBIDDEN:
        assert forbidden not in script
    lines = script.split("\n")[:-1]
    options = dict(line.removeprefix("#SBATCH --").partition("=")[::2] for line in lines if line.startswith("#SBATCH"))
    assert len(options) == sum(line.startswith("#SBATCH") for line in lines)  # each option once
    mem, cpus = options.get("mem"), options.get("cpus-per-task")
    if cluster.mem_per_gpu_gb is None:
        assert mem is None
    else:
        assert mem is not None and mem.endswith("G")
        gb = int(mem.removesuffix("G"))
        assert gb >= 1
        assert cluster.mem_max_gb is None or gb <= cluster.mem_max_gb
        assert gb == max(1, min(cluster.mem_per_gpu_gb * max(1, gpus), cluster.mem_max_gb or 10**9))
    if cluster.cpus_per_gpu is None:
        assert cpus is None
    else:
        assert cpus is not None and 1 <= int(cpus) <= (cluster.cpus_max or 10**9)
        assert int(cpus) == max(1, min(cluster.cpus_per_gpu * max(1, gpus), cluster.cpus_max or 10**9))
    named = f"eps-prop1-{user}" if cluster.user_in_job_name else "eps-prop1"
    assert options["job-name"] == named
    assert options.get("partition") == cluster.partition_for(qos)
    assert options.get("account") == cluster.account_for(qos)
    assert ("trap 'trap" in script) == cluster.cleanup_trap

    expected = _expected_env(cluster, gpus, user, env)
    body = _body(script)
    exports = [line for line in body if line.startswith("export ")]
    assert [line.split("=", 1)[0].removeprefix("export ") for line in exports] == sorted(expected)
    printed = render(evolve(job, command=("env", "-0")), output=output)
    assert printed.split("\n")[: -len(body) - 1] == lines[: -len(body)]  # the same options, only the body moved
    got = _env_through_bash(printed, tmp_path)
    assert {name: got.get(name) for name in expected} == expected


# --- P13: a row without the new fields renders as before -----------------------------------------

SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_sbatch.ambr"


def _pinned(name: str) -> str:
    """The text of the snapshot ``name`` as pinned before the cluster rows grew (serialized)."""
    snap = AmberDataSerializer.read_file(str(SNAPSHOTS)).get(name)
    assert snap is not None and isinstance(snap.data, str), name
    return snap.data


#: What only pacing, access and preemption read: never a render.
NOT_RENDERED = {"preemptible": ("x",), "access": "robot", "submit_gap_s": 7.5, "mem_max_per_gpu_gb": 80}


@pytest.mark.parametrize("changes", [{}, NOT_RENDERED], ids=["as-is", "non-render-fields"])
@pytest.mark.parametrize("user", [None, USER])
def test_p13_a_row_without_the_new_fields_renders_byte_for_byte_as_before(
    changes: dict[str, object], user: str | None
) -> None:
    """P13 (issue 31): LAB sets none of the new render fields (memory, CPUs, environment, user
    in the job name, cleanup trap): its renders are the snapshots pinned before them, whether
    or not a cluster user is known, and whatever the fields no render reads say."""
    lab = evolve(LAB, **changes)
    assert (lab.mem_per_gpu_gb, lab.cpus_per_gpu, lab.job_env, lab.multi_gpu_env) == (None, None, (), ())
    assert not lab.user_in_job_name and not lab.cleanup_trap
    serialize = AmberDataSerializer.serialize
    no_ladder = render_sbatch(TRAIN, lab, slurm_rung(lab, None, 2), dispatch_id="d0002", user=user, output="eps-%j.out")
    assert serialize(no_ladder) == _pinned("test_no_ladder_cluster")
    env = {"HF_HOME": "/data/hf cache", "EPS_NOTE": "it's $(not) run"}
    exported = render_sbatch(TRAIN, lab, slurm_rung(lab, None, 1), dispatch_id="env", user=user, env=env)
    assert serialize(exported) == _pinned("test_env_is_exported_quoted")
    assert serialize(_lab_render(FELLOWS, lab)) == _pinned("test_p13_no_ladder_render_snapshot")
