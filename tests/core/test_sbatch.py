"""sbatch renders: syrupy snapshots, hostile-string properties, and P13."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eps.core.model import CapacitySnapshot, ClusterConfig, Job, LaneKind, Provisioning, QosGrants, Rung, evolve
from eps.core.router import plan
from eps.core.sbatch import SbatchRenderError, quote_arg, render_sbatch
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY, FELLOWS

#: A second SLURM cluster, defined here, with no QoS ladder (renders never name a QoS).
LAB = ClusterConfig(name="lab", partition="batch", account=None, qos_ladder=(), gpus_per_node=4, gpu_model="A100")

TRAIN = Job(intent="gpu-2", duration_s=3 * 3600, command=("python", "train.py", "--lr", "3e-4", "--name", "run 1"))


def slurm_rung(cluster: ClusterConfig, qos: str | None, gpus: int) -> Rung:
    return Rung(cluster.name, LaneKind.SLURM, Provisioning.QUEUE, "test", qos=qos, gpus=gpus, machine=f"{gpus}xGPU")


# --- snapshots ------------------------------------------------------------------------------


@pytest.mark.parametrize("qos", ["high-eur", "normal-eur", "low-eur", "dev-eur"])
def test_fellows_tier(snapshot, qos: str) -> None:
    script = render_sbatch(TRAIN, FELLOWS, slurm_rung(FELLOWS, qos, 2), dispatch_id="d0001", output="eps-%j.out")
    assert script == snapshot


#: Fellows as the seed project ran it: low-eur on another partition (and account) than the other tiers.
SPLIT = evolve(FELLOWS, tier_partitions=(("low-eur", "general,overflow"),), tier_accounts=(("low-eur", "fellows-low"),))


def test_a_tier_with_its_own_partition_and_account(snapshot) -> None:
    script = render_sbatch(TRAIN, SPLIT, slurm_rung(SPLIT, "low-eur", 2), dispatch_id="d0001", output="eps-%j.out")
    assert "#SBATCH --partition=general,overflow\n" in script and "#SBATCH --account=fellows-low\n" in script
    assert script == snapshot


@pytest.mark.parametrize("qos", ["high-eur", "normal-eur", "dev-eur", None])
def test_every_other_tier_renders_byte_for_byte_as_before(qos: str | None) -> None:
    """P13: a tier's own partition changes only that tier's render."""
    rung = slurm_rung(SPLIT, qos, 2)
    split, plain = (render_sbatch(TRAIN, c, rung, dispatch_id="d0001") for c in (SPLIT, FELLOWS))
    assert split == plain


def test_no_ladder_cluster(snapshot) -> None:
    script = render_sbatch(TRAIN, LAB, slurm_rung(LAB, None, 2), dispatch_id="d0002", output="eps-%j.out")
    assert "--qos" not in script
    assert script == snapshot


def test_cpu_job(snapshot) -> None:
    job = Job(intent="cpu-small", duration_s=90, command=("bash", "-c", "echo $HOME; ls | wc -l"))
    script = render_sbatch(job, FELLOWS, slurm_rung(FELLOWS, "low-eur", 0), dispatch_id="cpu1")
    assert "--gres" not in script
    assert script == snapshot


def test_multi_gpu_job(snapshot) -> None:
    job = Job(intent="gpu-8", duration_s=6 * 86_400 + 1, command=("torchrun", "--nproc-per-node=8", "fit.py"))
    script = render_sbatch(job, FELLOWS, slurm_rung(FELLOWS, "high-eur", 8), dispatch_id="big8", output="/s/%x.%j")
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
        render_sbatch(TRAIN, FELLOWS, slurm_rung(FELLOWS, "high-eur", 2), **kwargs)  # type: ignore[arg-type]
    assert exc.value.field == field


def test_refuses_hostile_cluster_values() -> None:
    bad = evolve(FELLOWS, account="fellows\n#SBATCH --qos=dev-eur")
    with pytest.raises(SbatchRenderError, match="--account"):
        render_sbatch(TRAIN, bad, slurm_rung(bad, "high-eur", 2), dispatch_id="xyz")


def test_refuses_empty_command_bad_duration_and_foreign_rung() -> None:
    rung = slurm_rung(FELLOWS, "high-eur", 2)
    with pytest.raises(SbatchRenderError, match="command"):
        render_sbatch(evolve(TRAIN, command=()), FELLOWS, rung, dispatch_id="xyz")
    with pytest.raises(SbatchRenderError, match="duration"):
        render_sbatch(evolve(TRAIN, duration_s=0), FELLOWS, rung, dispatch_id="xyz")
    with pytest.raises(SbatchRenderError, match="rung"):
        render_sbatch(TRAIN, LAB, rung, dispatch_id="xyz")
    with pytest.raises(SbatchRenderError, match="NUL"):
        render_sbatch(evolve(TRAIN, command=("a\x00b",)), FELLOWS, rung, dispatch_id="xyz")


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
    try:
        script = render_sbatch(
            TRAIN, FELLOWS, slurm_rung(FELLOWS, "high-eur", 2), dispatch_id=dispatch_id, output=output
        )
    except SbatchRenderError:
        return
    lines = script.split("\n")
    assert len(lines) == 11  # shebang, 8 #SBATCH lines, the command, ""
    for line in lines[1:9]:
        assert line.startswith("#SBATCH --")
        assert len(line.split()) == 2  # sbatch splits on blanks: one option per line, nothing more


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
