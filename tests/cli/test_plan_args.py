"""eps plan read without argparse (eps.shell.cli.args.plan_namespace): whenever it reads an
argv, argparse reads the same argv into the same namespace; whatever it does not read goes to
argparse (and so fails, or helps, in argparse's words)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from eps.shell.cli import args as plain
from eps.shell.cli.parser import build, glue_negative_values


def _argparse(argv: list[str]) -> dict[str, Any]:
    return dict(vars(build("plan").parse_args(argv)))


VALUES = ["3h", "2h30m", "-3h", "", " ", "0", "00", "5", "-1", "x", "1.5", "nan", "inf", "1e3", "300", "interruption",
          "interruption,error", "no-capacity", "bogus", "job.toml", "fellows:high-eur=700", "high-eur=700", "Priority",
          "gcp", "vm", "--json", "-", "-x", "a=b", "gpu-1", "1:30:00", "10m"]  # fmt: skip
NOISE = ["--dur", "--js", "--help", "-h", "--list-intents", "--version", "--bogus", "gpu-2", "--json=1", "--no-json",
         "--restartable=1", "-x", "-", "", "--", "--wid", "--park-r", "x=y", "--=x", "--pin="]  # fmt: skip


@st.composite
def argvs(draw: Any) -> list[str]:
    argv = ["plan"]
    if draw(st.booleans()):
        argv.append(draw(st.sampled_from(["gpu-1", "cpu-small", "nope", "gpu-1 x", "", "-gpu", "=", "plan"])))
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["value", "value=", "flag", "noise"]))
        if kind == "flag":
            argv.append(draw(st.sampled_from(sorted(plain.PLAN_FLAGS))))
        elif kind == "noise":
            argv.append(draw(st.sampled_from(NOISE)))
        else:
            option, value = draw(st.sampled_from(sorted(plain.PLAN_VALUES))), draw(st.sampled_from(VALUES))
            argv.extend([f"{option}={value}"] if kind == "value=" else [option, value])
    if draw(st.booleans()) and len(argv) > 2:  # the intent after the options
        argv.append(argv.pop(1))
    return argv


GOOD = {"--job": ["job.toml", "a b.toml", "x=y"], "--duration": ["3h", "45s", "1:30:00", "0", "1.5h", " 2d "],
        "--footprint-gb": ["0", "300", "1e3", "0.5", " 7 "], "--count": ["1", "4", "+2", " 8"],
        "--sweep": ["1", "6", "1000", "1001"], "--sweep-parallel": ["1", "2", "0"],
        "--retry": ["interruption", "no-capacity,error", "error,,"], "--retry-for": ["1d", "90min"],
        "--max-restarts": ["0", "5", "1000"], "--sync-every": ["0", " 0 ", "10m"], "--pin": ["gcp", "fellows", "x"],
        "--snapshot": ["s.json"], "--grants": ["g.toml"], "--park": ["high-eur=700", "fellows:low-eur=1h", "x"],
        "--park-reason": ["Priority", "Resources x"], "--stall-after": ["20s", "off", "0", "x"],
        "--on-stall": ["stop", "notify", "kill"], "--gpu": ["l4", "a100-80,h100", "any", "H200", "x", "l4,,"],
        "--gpu-mem": ["0", "80", " 24 ", "-1", "8.5"]}  # fmt: skip


@st.composite
def ordinary(draw: Any) -> list[str]:
    """Mostly what plan_namespace reads: an intent, then each option at most once."""
    argv = ["plan"]
    if draw(st.integers(0, 9)):
        argv.append(draw(st.sampled_from(["gpu-1", "cpu-small", "nope", "gpu 1", "plan", "a=b"])))
    options = draw(st.lists(st.sampled_from(sorted({*plain.PLAN_VALUES, *plain.PLAN_FLAGS})), unique=True))
    for option in options:
        if option in plain.PLAN_FLAGS:
            argv.append(option)
            continue
        value = draw(st.sampled_from(GOOD[option]) if draw(st.integers(0, 9)) else st.sampled_from(VALUES))
        argv.extend([f"{option}={value}"] if draw(st.booleans()) else [option, value])
    return argv


@settings(max_examples=1500)
@given(argvs() | ordinary())
def test_what_it_reads_argparse_reads_alike(argv: list[str]) -> None:
    args = glue_negative_values(argv)
    ns = plain.plan_namespace(args)
    if ns is not None:
        assert list(vars(ns).items()) == list(_argparse(args).items())


def test_it_reads_the_ordinary_plans() -> None:
    for line in ("plan gpu-1 --duration 3h --json", "plan cpu-small --duration 30m --json", "plan gpu-1",
                 "plan --job job.toml --count 4", "plan gpu-8 --duration 1h --restartable --wide",
                 "plan gpu-1 --duration=3h --park high-eur=700 --park-reason Priority --pin fellows",
                 "plan cpu-small --footprint-gb 300 --no-gradient-fit --retry interruption,error --max-restarts 5",
                 "plan gpu-1 --retry-for 2d --sync-every 0 --snapshot s.json --grants g.toml"):  # fmt: skip
        argv = line.split()
        ns = plain.plan_namespace(glue_negative_values(argv))
        assert ns is not None, line
        assert list(vars(ns).items()) == list(_argparse(argv).items())


def test_it_leaves_the_rest_to_argparse() -> None:
    for line in ("plan --help", "plan gpu-1 --dur 3h", "plan gpu-1 --duration -3h", "plan gpu-1 --duration x",
                 "plan gpu-1 --json --json", "plan gpu-1 gpu-2", "plan --duration 3h gpu-1",
                 "plan gpu-1 --list-intents", "plan gpu-1 --count 0", "plan gpu-1 --pin", "plan gpu-1 --json=1",
                 "intents", "--version plan"):  # fmt: skip
        assert plain.plan_namespace(glue_negative_values(line.split())) is None, line


def test_it_knows_every_option_of_eps_plan() -> None:
    [sub] = [a for a in build("plan")._actions if a.dest == "cmd"]
    options = {o for a in sub.choices["plan"]._actions for o in a.option_strings}  # type: ignore[attr-defined]
    assert options == {*plain.PLAN_VALUES, *plain.PLAN_FLAGS, *plain.PLAN_LISTS, "-h", "--help", "--list-intents"}
    assert list(_argparse(["plan"]).items()) == list(plain.PLAN_DEFAULTS.items())
