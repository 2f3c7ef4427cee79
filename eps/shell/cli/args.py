"""What ``eps`` reads from its command line without argparse: the subcommands and their
examples, the job options' defaults, the checks of the option values (one-line
``ValueError``s; :mod:`eps.shell.cli.parser` gives them to argparse as its types), and
:func:`plan_namespace`, which reads the argv of an ordinary ``eps plan`` (argparse, its
import and its parser cost about 4 ms of every ``eps plan``, a tenth of it).

:func:`plan_namespace` reads only ``plan [INTENT] OPTION...`` where every option is one of
``eps plan``'s own, spelled out, given once (``--input``: any number of times), with a value
that does not start with ``-``, and every value passes its check; then it returns what
argparse would (a test holds the two to each other).  Anything else (help, an abbreviation,
a misspelt or repeated option, a second positional, a bad value) is argparse's to read, and
to refuse in its own words.
"""

from __future__ import annotations

from types import SimpleNamespace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


#: Each subcommand's examples, shown at the end of its help (and parsed by a test).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "plan": (
        "eps plan gpu-1 --duration 2h",
        "eps plan cpu-small --duration 30m --json",
        "eps plan --job job.toml --count 4",
    ),
    "intents": ("eps intents", "eps intents --json"),
    "execute": (
        "eps execute --job job.toml --wait",
        "eps execute cpu-small --duration 2h --workdir . --setup 'pip install -r requirements.txt' "
        "--env HF_TOKEN --wait -- python analyse.py",
        "eps execute cpu-small --count 8 --workdir . -- 'python shard.py $EPS_TASK_INDEX $EPS_TASK_COUNT'",
    ),
    "check": ("eps check", "eps check --json"),
    "status": ("eps status", "eps status --active --since 2d", "eps status --intent gpu-1 --json"),
    "cancel": ("eps cancel e1a2b3c4d5", "eps cancel --all"),
    "reconcile": ("eps reconcile", "eps reconcile --json"),
    "logs": ("eps logs -f e1a2b3c4d5", "eps logs e1a2b3c4d5 --tail 50",
             "eps logs e1a2b3c4d5 --json --offset 65536"),
    "pull": ("eps pull e1a2b3c4d5", "eps pull e1a2b3c4d5 --to results/"),
    "wait": ("eps wait e1a2b3c4d5", "eps wait e1a2b3c4d5 --timeout 5m --json"),
    "attach": ("eps attach e1a2b3c4d5", "eps attach e1a2b3c4d5 --timeout 2m"),
    "supervise": ("eps supervise", "eps supervise --json"),
    "ssh": ("eps ssh e1a2b3c4d5", "eps ssh e1a2b3c4d5 -- nvidia-smi"),
    "simulate": (
        "eps simulate --since 7d --caps 600,300 --caps 300,120 --caps 900,300",
        "eps simulate --sacct sacct.txt --json",
        "eps simulate --sacct sacct.txt --all-jobs --plot caps.png",
    ),
    "schema": ("eps schema", "eps schema plan"),
    "mcp": ("eps mcp", "eps mcp --tools"),
    "guide": ("eps guide", "eps guide > AGENTS.md"),
    "completion": (
        "eps completion bash > ~/.local/share/bash-completion/completions/eps",
        "eps completion zsh > ~/.zfunc/_eps",
    ),
}

#: The subcommands (each has its examples above; a test holds this to the parser's own list).
SUBCOMMANDS: tuple[str, ...] = tuple(EXAMPLES)


# --- the values of the options: one-line ValueErrors ------------------------------------------


def duration(text: str) -> int:
    from eps.core.durations import parse_duration

    return parse_duration(text)


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"count must be a whole number, got {text!r}") from None
    if value < 1:
        raise ValueError(f"count must be at least 1, got {value}")
    return value


def retry(text: str) -> tuple[str, ...]:
    from eps.core.healing import job_retry

    return job_retry(text)


def max_restarts(text: str) -> int:
    from eps.core.healing import job_max_restarts

    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"max restarts must be a whole number, got {text!r}") from None
    return job_max_restarts(value)


def stall_after(text: str) -> int:
    from eps.core.stall import parse_stall_after

    return parse_stall_after(text)


def on_stall(text: str) -> str:
    from eps.core.stall import check_on_stall

    return check_on_stall(text)


def seconds_or_zero(text: str) -> int:
    if text.strip() == "0":
        return 0
    return duration(text)


def gpu(text: str) -> tuple[str, ...]:
    from eps.core.gpus import parse_gpu_models

    return parse_gpu_models(text)


def gpu_mem(text: str) -> int:
    from eps.core.gpus import parse_gpu_mem

    return parse_gpu_mem(text)


def _whole(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{what} must be a whole number, got {text!r}") from None


def sweep(text: str) -> int:
    from eps.core.sweep import sweep_value

    return sweep_value(_whole(text, "sweep"))


def sweep_parallel(text: str) -> int:
    from eps.core.sweep import sweep_parallel_value

    return sweep_parallel_value(_whole(text, "sweep parallel"))


def footprint(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"footprint must be a number of GB, got {text!r}") from None
    import math

    if value < 0 or not math.isfinite(value):
        raise ValueError(f"footprint must be a finite number >= 0, got {text!r}")
    return value


# --- eps plan without argparse ----------------------------------------------------------------

#: ``eps plan``'s options with a value: option -> (its dest, its check).
PLAN_VALUES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--job": ("job", str),
    "--duration": ("duration", duration),
    "--footprint-gb": ("footprint_gb", footprint),
    "--count": ("count", count),
    "--sweep": ("sweep", sweep),
    "--sweep-parallel": ("sweep_parallel", sweep_parallel),
    "--gpu": ("gpu", gpu),
    "--gpu-mem": ("gpu_mem", gpu_mem),
    "--retry": ("retry", retry),
    "--retry-for": ("retry_for", duration),
    "--max-restarts": ("max_restarts", max_restarts),
    "--sync-every": ("sync_every", seconds_or_zero),
    "--stall-after": ("stall_after", stall_after),
    "--on-stall": ("on_stall", on_stall),
    "--pin": ("pin", str),
    "--snapshot": ("snapshot", str),
    "--grants": ("grants", str),
    "--park": ("park", str),
    "--park-reason": ("park_reason", str),
}
#: ``eps plan``'s repeatable options with a value (argparse's ``append``): option -> its dest.
PLAN_LISTS: dict[str, str] = {"--input": "input"}
#: ``eps plan``'s flags: option -> (its dest, its value).
PLAN_FLAGS: dict[str, tuple[str, bool]] = {
    "--restartable": ("restartable", True),
    "--no-restartable": ("restartable", False),
    "--gradient-fit": ("gradient_fit", True),
    "--no-gradient-fit": ("gradient_fit", False),
    "--fall-through": ("fall_through", True),
    "--no-fall-through": ("fall_through", False),
    "--json": ("json", True),
    "--wide": ("wide", True),
}
#: What argparse's namespace of ``eps plan`` holds when no option is given, in its order (the
#: root's options, the subcommand, then the plan parser's).
PLAN_DEFAULTS: dict[str, Any] = {
    "version": False, "list_intents": False, "cmd": "plan", "intent": None, "job": None, "duration": None,
    "restartable": None, "footprint_gb": None, "gradient_fit": None, "fall_through": None, "count": None, "sweep": None,
    "sweep_parallel": None, "gpu": None, "gpu_mem": None, "retry": None,
    "retry_for": None, "max_restarts": None, "sync_every": None, "stall_after": None, "on_stall": None,
    "pin": None, "snapshot": None, "grants": None,
    "json": False, "wide": False, "park": None, "park_reason": None, "input": None,
}  # fmt: skip


def plan_namespace(args: list[str]) -> SimpleNamespace | None:
    """The namespace argparse makes of ``args`` (after :func:`glue_negative_values`) when they
    are an ordinary ``eps plan`` (module docstring); ``None`` for argparse to read them."""
    if not args or args[0] != "plan":
        return None
    given = dict(PLAN_DEFAULTS)
    seen: set[str] = set()
    i = 1
    if len(args) > 1 and args[1] and not args[1].startswith("-"):
        given["intent"] = args[1]
        i = 2
    while i < len(args):
        arg = args[i]
        option, eq, explicit = arg.partition("=")
        if not eq and arg in PLAN_FLAGS:
            dest, flag = PLAN_FLAGS[arg]
            value: Any = flag
            i += 1
        elif option in PLAN_VALUES or option in PLAN_LISTS:
            dest, check = PLAN_VALUES[option] if option in PLAN_VALUES else (PLAN_LISTS[option], str)
            if eq:
                text = explicit
                i += 1
            elif i + 1 < len(args):
                text = args[i + 1]
                i += 2
            else:
                return None
            if not text or text.startswith("-"):
                return None
            try:
                value = check(text)
            except ValueError:
                return None
        else:
            return None
        if option in PLAN_LISTS:
            given[dest] = [*(given[dest] or ()), value]
            continue
        if dest in seen:
            return None
        seen.add(dest)
        given[dest] = value
    return SimpleNamespace(**given)


#: Options that take a value which may look like a negative number.
VALUE_OPTIONS = ("--duration", "--footprint-gb", "--count", "--sweep", "--sweep-parallel", "--park")


def glue_negative_values(args: list[str]) -> list[str]:
    """``--duration -3h`` -> ``--duration=-3h`` so the value reaches its validator
    (argparse would otherwise take ``-3h`` for an option and say something vaguer)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in VALUE_OPTIONS and i + 1 < len(args) and args[i + 1].startswith("-") and args[i + 1][1:2].isdigit():
            out.append(f"{a}={args[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out
