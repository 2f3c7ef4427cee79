"""The cases of the golden record (benchmarks/golden/record.py): argv, environment and files.

Built from the README (every command it shows), every subcommand's ``--help`` and its
examples, the agent guide (eps/guide.md) and the tests (tests/cli, tests/mcp), with their
bad input.  A case is one or more steps run in the same fresh world (home, state dir, files);
``{TMP}`` in an argv, an environment value or a file is the case's temp dir, ``{D}`` the first
dispatch id an earlier step printed.  Files go in the case's ``work/`` (the cwd); a name that
starts with ``~/`` goes in its home.

Nothing here may touch the SLURM cluster or the internet: no case gives a RunPod key or GCP
credentials, no case runs ``eps check`` with a cluster login (ssh to a host name), and the
SLURM clients are not on PATH.
"""

from __future__ import annotations

import glob
import os
from typing import Any, NamedTuple

UNKNOWN = "e0000000000"  # a well-formed dispatch id no ledger holds (tests/mcp uses it)
#: the ids given to the VM jobs' dispatches (--dispatch-id), one per case: the VM lane finds a job's
#: processes by its dispatch id on the whole machine, so ``eps cancel D`` in one state dir also
#: kills a job of the same id that another state dir (another case running meanwhile) started
FIXED = tuple(f"e00000000a{n}" for n in range(1, 8))

SUBCOMMANDS = ("plan", "intents", "execute", "check", "status", "cancel", "reconcile", "logs", "pull", "wait",
               "attach", "supervise", "ssh", "simulate", "schema", "mcp", "guide", "completion", "notify")  # fmt: skip
INTENTS = ("cpu-small", "cpu-bigmem", "debug", "gpu-1", "gpu-2", "gpu-4", "gpu-8", "capture-7b")
SCHEMAS = ("cancel", "check", "error", "events", "execute", "intents", "logs", "next_events", "notify", "plan",
           "pull", "reconcile", "simulate", "status", "wait")  # fmt: skip


class Case(NamedTuple):
    name: str
    kind: str = "cli"  # cli: argv steps; api: python snippets; mcp: one server, JSON-RPC calls
    steps: tuple[tuple[str, ...], ...] = ()
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    env: dict[str, str | None] = {}
    files: dict[str, str] = {}
    fixtures: dict[str, str] = {}  # file name in work/ -> a file name found under the recorded repo's tests/
    timeout: float = 60.0
    stdin: str = ""
    slow: bool = False
    #: the case looks at the whole machine (reconcile and ``cancel --all`` list every eps VM-lane
    #: job on it, as ``foreign`` when another state dir owns it): run it in a PID namespace of its
    #: own, where only its own processes are
    own_pids: bool = False


def fixture(repo: str, name: str) -> str:
    found = sorted(glob.glob(os.path.join(repo, "tests", "**", name), recursive=True))
    if not found:
        raise FileNotFoundError(f"no {name} under {repo}/tests")
    return found[0]


README_JOB = """\
intent = "cpu-small"
duration = "2h"
restartable = true
count = 4
backend = "gcp"
workdir = "."
setup = "pip install -r requirements.txt"
env = ["HF_TOKEN"]
command = "python analyse.py --shard $EPS_TASK_INDEX --out $EPS_OUTPUT_DIR/result.csv"
sync_every = "10m"
stall_after = "30m"
on_stall = "notify"

[retry]
on = ["interruption", "error"]
for = "6h"
max_restarts = 5
"""

JOB_FILES = {  # tests/cli/test_usability.py, test_retry_cli.py, test_unknown_duration_cli.py
    "readme": README_JOB,
    "flags": 'intent = "cpu-small"\nduration = "1h30m"\nrestartable = true\ncount = 3\nbackend = "gcp"\n'
             'command = "python a.py"\n',
    "no-duration": 'intent = "gpu-1"\n',
    "no-intent": 'duration = "1h"\n',
    "bad-duration": 'intent = "cpu-small"\nduration = "soon"\n',
    "count-str": 'intent = "cpu-small"\ncount = "4"\n',
    "restartable-str": 'intent = "cpu-small"\nrestartable = "yes"\n',
    "env-str": 'intent = "cpu-small"\nenv = "HF_TOKEN"\n',
    "pin-key": 'intent = "cpu-small"\npin = "gcp"\n',
    "count-0": 'intent = "cpu-small"\ncount = 0\n',
    "command-empty": 'intent = "cpu-small"\ncommand = []\n',
    "not-toml": "intent = [\n",
    "retry-bad-event": 'intent = "cpu-small"\n[retry]\non = ["preempt"]\n',
    "retry-bad-key": 'intent = "cpu-small"\n[retry]\nwhen = ["error"]\n',
    "retry-max": 'intent = "cpu-small"\n[retry]\nmax_restarts = 1001\n',
    "sync-0": 'intent = "cpu-small"\nduration = "30m"\nsync_every = 0\n[retry]\nmax_restarts = 0\n',
}  # fmt: skip

GOOD_CONFIGS = {  # tests/cli/test_plan_cli.py, test_lane_settings.py, README "Files eps reads"
    "caps": '[[clusters]]\nname = "fellows"\nfirst_park_cap_s = 900\nnext_park_cap_s = 200\n',
    "dev": '[[clusters]]\nname = "fellows"\ndev_qos_for_debug = true\n',
    "trivial": "[thresholds]\ntrivial_op_s = 300\n",
    "spot": "[thresholds]\nspot_max_s = 600\nbig_footprint_gb = 20\n",
    "vm-small": "[vm]\nvcpus = 2\nmem_gb = 4\nfree_disk_gb = 20\n",
    "gcp-project": '[gcp]\nproject = "my-project"\nzones = ["europe-west4-a", "us-central1-a"]\n',
    "nibi-left-out": '[[clusters]]\nname = "nibi"\nlogin = ["ssh", "nibi-login"]\n',
    "nibi-ordered": '[[clusters]]\nname = "nibi"\nlogin = ["ssh", "nibi-login"]\n'
                    '[lanes]\ngpu = ["fellows", "nibi", "gcp"]\n',
    "nibi-master": '[[clusters]]\nname = "nibi"\nlogin = ["ssh", "nibi-login"]\nlogin_master = "{TMP}/cm-nibi"\n'
                   '[lanes]\ngpu = ["fellows", "nibi", "gcp"]\n',
    "cpu-gcp-only": '[lanes]\ncpu = ["gcp"]\n',
    "fellows-login": '[[clusters]]\nname = "fellows"\nlogin = ["ssh", "login"]\nuser = "alice"\n',
    "jobs": '[jobs]\nmax_time_limit = "2d"\nsync_every_s = 120\nstall_after_s = 0\n',
    "notify-ok": '[notify]\nurls = ["json://127.0.0.1:9/hook"]\nevents = ["ended", "failed"]\n',
}  # fmt: skip

BAD_CONFIGS = {
    "not-toml": "this is not toml [\n",
    "unknown-section": "[bogus]\nx = 1\n",
    "unknown-key": "[thresholds]\nnope = 1\n",
    "wrong-type": '[thresholds]\ntrivial_op_s = "soon"\n',
    "cluster-unknown-key": '[[clusters]]\nname = "fellows"\nfirst_park_cap = 5\n',
    "cluster-negative-cap": '[[clusters]]\nname = "fellows"\nfirst_park_cap_s = -5\n',
    "lanes-runpod-gpu": '[lanes]\ngpu = ["fellows", "runpod"]\n',
    "lanes-twice": '[lanes]\ngpu = ["fellows", "fellows"]\n',
    "lanes-typo": '[lanes]\ngpu = ["fellow"]\n',
    "lanes-empty": "[lanes]\ngpu = []\n",
    "lanes-vm-gpu": '[lanes]\ngpu = ["vm"]\n',
    "lanes-cpu-fellows": '[lanes]\ncpu = ["fellows"]\n',
    "lanes-cpu-vm": '[lanes]\ncpu = ["vm", "gcp"]\n',
    "lanes-aws": '[lanes]\ncpu = ["gcp", "aws"]\n',
    "lanes-str": '[lanes]\ngpu = "fellows"\n',
    "lanes-order": '[lanes]\norder = ["gcp"]\n',
    "notify-url": '[notify]\nurls = ["nope"]\n',
    "notify-event": '[notify]\nurls = ["json://127.0.0.1:9/x"]\nevents = ["exploded"]\n',
    "supervise": '[jobs]\nsupervise = "sometimes"\n',
    "gcp-flex": "[gcp]\nflex_start_wait_s = 5\n",
}

DURATIONS = ("45s", "30m", "3h", "2d", "1h30m", "90min", "01:30:00", "2H", "3600", "365d",
             "366d", "-5", "0", "soon", "1.5h", "")  # fmt: skip

SNAPSHOT_JSON = """{
  "clusters": [{"cluster": "fellows", "reachable": true}],
  "queues": [{"cluster": "fellows", "qos": "high-eur", "free_gpus": 0, "pending_reason": "QOSMaxGRESPerUser"}],
  "gcp": [{"machine": "e2-standard-4", "zone": "europe-west4-*", "state": "exhausted", "provisioning": "spot"}],
  "runpod": [{"id": "cpu3g", "stock": "none"}],
  "vm": {"vcpus": 4, "mem_gb": 16, "free_disk_gb": 40}
}
"""
SNAPSHOT_TOML = '[[gcp]]\nmachine = "e2-standard-4"\nzone = "*"\nstate = "exhausted"\n'
SNAPSHOT_BAD = '{"gcp": [{"machine": "e2-standard-4", "zone": "*", "state": "gone"}]}\n'
GRANTS = ('{"fellows": [{"name": "high-eur", "priority": 100000, "max_wall": "1-00:00:00", "max_gpus_per_user": 16},'
          '\n             {"name": "low-eur", "priority": 10000, "max_wall": "14-00:00:00"}]}\n')  # fmt: skip
GRANTS_BAD = '{"fellows": [{"name": "high-eur", "priority": "high"}]}\n'
INPUT_FILES = {"snap.json": SNAPSHOT_JSON, "snap.toml": SNAPSHOT_TOML, "bad-snap.json": SNAPSHOT_BAD,
               "grants.json": GRANTS, "bad-grants.json": GRANTS_BAD, "not-json.json": "{nope\n"}  # fmt: skip


def cli(name: str, *argv: str, **kw: Any) -> Case:
    return Case(name, steps=(tuple(argv),), **kw)


def seq(name: str, *steps: tuple[str, ...], **kw: Any) -> Case:
    return Case(name, steps=tuple(steps), **kw)


def config(text: str) -> dict[str, Any]:
    return {"env": {"EPS_CONFIG": "{TMP}/work/config.toml"}, "files": {"config.toml": text}}


def _help() -> list[Case]:
    out = [cli("help", "--help"), cli("help-h", "-h"), cli("no-args"), cli("version", "--version"),
           cli("bogus-subcommand", "bogus"), cli("subcommand-typo", "pln", "gpu-1"), cli("bogus-flag", "--bogus"),
           cli("list-intents-top", "--list-intents"), cli("notify-test-help", "notify", "test", "--help"),
           cli("plan-h", "plan", "-h")]  # fmt: skip
    out += [cli(f"help-{s}", s, "--help") for s in SUBCOMMANDS]
    return out


def _plans() -> list[Case]:
    out = []
    for i in INTENTS:
        out += [cli(f"plan-{i}-2h", "plan", i, "--duration", "2h"),
                cli(f"plan-{i}-2h-json", "plan", i, "--duration", "2h", "--json"),
                cli(f"plan-{i}-unknown-duration", "plan", i)]  # fmt: skip
    for d in DURATIONS:
        out.append(cli(f"plan-duration-{d or 'empty'}", "plan", "gpu-1", "--duration", d, "--json"))
    out.append(cli("plan-duration-equals", "plan", "gpu-1", "--duration=45m"))
    for lane in ("vm", "fellows", "gcp", "runpod", "fellow", "nibi"):
        out.append(cli(f"plan-gpu-pin-{lane}", "plan", "gpu-1", "--duration", "3h", "--pin", lane))
        out.append(cli(f"plan-cpu-pin-{lane}-json", "plan", "cpu-small", "--duration", "30m", "--pin", lane, "--json"))
    parks = [("high-eur=11m",), ("fellows:normal-eur=100", "--park-reason", "Priority"), ("low-eur=100000s",),
             ("normal-eur=400s",), ("high-eur",), ("=5m",), ("high-eur=soon",), ("nosuch=5m",), ("nibi:high-eur=5m",),
             ("high-eur=700",)]  # fmt: skip
    for n, park in enumerate(parks):
        out.append(cli(f"plan-park-{n}", "plan", "gpu-1", "--duration", "1h", "--park", *park, "--json"))
    out.append(cli("plan-park-text", "plan", "gpu-1", "--park", "high-eur=11m"))
    out += [cli("plan-park-cpu", "plan", "cpu-small", "--duration", "1h", "--park", "high-eur=100s"),
            cli("plan-park-pinned", "plan", "gpu-1", "--duration", "1h", "--pin", "gcp", "--park", "high-eur=100s"),
            cli("plan-park-30d", "plan", "gpu-1", "--duration", "30d", "--park", "high-eur=100s"),
            cli("plan-park-reason-alone", "plan", "gpu-1", "--park-reason", "Priority")]  # fmt: skip
    odd = {  # counts, footprints, flags, positional and option mistakes (tests/cli, README)
        "count-gpu": ("gpu-1", "--count", "4", "--duration", "1h"), "count-debug": ("debug", "--duration", "1h",
        "--count", "2"), "count-cpu": ("cpu-small", "--duration", "2h", "--count", "3", "--restartable"),
        "count-0": ("gpu-1", "--count", "0"), "count-x": ("gpu-1", "--count", "x"), "count-gpu-3": ("gpu-1",
        "--count", "3"), "count-neg": ("cpu-small", "--count", "-2"),
        "footprint-80": ("cpu-bigmem", "--duration", "5h", "--footprint-gb", "80"),
        "footprint-cpu-80": ("cpu-small", "--duration", "20s", "--footprint-gb", "80"),
        "footprint-neg": ("cpu-small", "--footprint-gb", "-1"), "footprint-x": ("cpu-small", "--footprint-gb", "x"),
        "gradient-fit": ("cpu-small", "--duration", "1h", "--gradient-fit"),
        "restartable-2d": ("gpu-4", "--duration", "2d", "--restartable"),
        "restartable-no": ("gpu-1", "--duration", "3h", "--restartable", "--no-restartable"),
        "gpu-30d": ("gpu-1", "--duration", "30d"), "gpu-8-10d": ("gpu-8", "--duration", "10d"),
        "fall-through": ("gpu-1", "--duration", "1h", "--fall-through"),
        "trivial": ("cpu-small", "--duration", "20s"), "trivial-count": ("cpu-small", "--duration", "20s",
        "--count", "3"), "bigmem-trivial": ("cpu-bigmem", "--duration", "30s"),
        "wide": ("gpu-1", "--duration", "2h", "--wide"), "wide-cpu": ("cpu-small", "--duration", "30m", "--wide"),
        "two-intents": ("gpu-1", "gpu-2"), "no-intent": (), "intent-typo": ("gpu1",),
        "intent-typo-json": ("gpu1", "--json"), "intent-underscore": ("cpu_small",),
        "intent-nonsense": ("quantum",), "bogus-option": ("gpu-1", "--bogus"), "abbrev": ("gpu-1", "--dur", "1h"),
        "repeated": ("gpu-1", "--duration", "1h", "--duration", "2h"), "list-intents": ("--list-intents",),
        "retry": ("cpu-small", "--duration", "30m", "--retry", "interruption,error", "--retry-for", "6h",
                  "--max-restarts", "5"),
        "retry-nocap": ("cpu-small", "--duration", "10m", "--retry", "no-capacity"),
        "retry-stalled": ("gpu-1", "--duration", "1h", "--retry", "stalled", "--on-stall", "stop", "--json"),
        "retry-bad": ("cpu-small", "--retry", "preempt"), "retry-empty": ("cpu-small", "--retry", ""),
        "retry-for-bad": ("cpu-small", "--retry-for", "soon"), "max-restarts-neg": ("cpu-small", "--max-restarts",
        "-1"), "max-restarts-big": ("cpu-small", "--max-restarts", "1001"),
        "sync-every": ("cpu-small", "--duration", "30m", "--sync-every", "30s", "--json"),
        "sync-every-0": ("cpu-small", "--duration", "30m", "--sync-every", "0"),
        "sync-every-bad": ("cpu-small", "--sync-every", "soon"),
        "stall-after": ("cpu-small", "--duration", "3h", "--stall-after", "20m"),
        "stall-off": ("gpu-1", "--duration", "3h", "--stall-after", "off", "--json"),
        "stall-bad": ("gpu-1", "--stall-after", "x"), "on-stall-bad": ("gpu-1", "--on-stall", "explode"),
        "snapshot-json": ("cpu-small", "--snapshot", "snap.json"),
        "snapshot-json-gpu": ("gpu-1", "--duration", "2h", "--snapshot", "snap.json", "--json"),
        "snapshot-toml": ("cpu-small", "--duration", "2h", "--snapshot", "snap.toml", "--json"),
        "snapshot-bad": ("cpu-small", "--snapshot", "bad-snap.json"),
        "snapshot-bad-json": ("cpu-small", "--snapshot", "bad-snap.json", "--json"),
        "snapshot-missing": ("cpu-small", "--snapshot", "missing.json"),
        "snapshot-not-json": ("cpu-small", "--snapshot", "not-json.json"),
        "grants": ("gpu-1", "--duration", "2d", "--restartable", "--grants", "grants.json", "--json"),
        "grants-text": ("gpu-1", "--duration", "2d", "--grants", "grants.json"),
        "grants-bad": ("gpu-1", "--grants", "bad-grants.json"), "grants-missing": ("gpu-1", "--grants", "nope.json"),
    }  # fmt: skip
    for name, argv in odd.items():
        out.append(cli(f"plan-{name}", "plan", *argv, files=INPUT_FILES))
    for name, text in JOB_FILES.items():
        out.append(cli(f"plan-job-{name}", "plan", "--job", "job.toml", files={"job.toml": text}))
    out += [cli("plan-job-readme-json", "plan", "--job", "job.toml", "--json", files={"job.toml": README_JOB}),
            cli("plan-job-readme-count", "plan", "--job", "job.toml", "--count", "4", files={"job.toml": README_JOB}),
            cli("plan-job-override", "plan", "--job", "job.toml", "cpu-bigmem", "--duration", "2h", "--no-restartable",
                "--count", "1", "--json", files={"job.toml": JOB_FILES["flags"]}),
            cli("plan-job-json-backend", "plan", "--job", "job.json", "--json",
                files={"job.json": '{"intent": "gpu-1", "duration": 3600, "backend": "fellows"}\n'}),
            cli("plan-job-missing", "plan", "--job", "nope.toml"),
            cli("plan-job-duration-flag", "plan", "--job", "job.toml", "--duration", "30m", "--json",
                files={"job.toml": JOB_FILES["no-duration"]})]  # fmt: skip
    return out


def _settings() -> list[Case]:
    out = []
    for name, text in GOOD_CONFIGS.items():
        out.append(cli(f"config-{name}-gpu", "plan", "gpu-1", "--duration", "3h", "--json", **config(text)))
        out.append(cli(f"config-{name}-cpu", "plan", "cpu-small", "--duration", "4m", **config(text)))
    out += [cli("config-dev-debug", "plan", "debug", "--duration", "20m", "--json", **config(GOOD_CONFIGS["dev"])),
            cli("config-nibi-pin", "plan", "gpu-1", "--duration", "3h", "--pin", "nibi", "--json",
                **config(GOOD_CONFIGS["nibi-left-out"])),
            cli("config-nibi-master-check", "check", "--json", **config(GOOD_CONFIGS["nibi-master"])),
            cli("config-nibi-master-check-text", "check", "--timeout", "1",  # wide: no path cut by a wrap
                **{**config(GOOD_CONFIGS["nibi-master"]), "env": {"EPS_CONFIG": "{TMP}/work/config.toml",
                                                                  "COLUMNS": "400"}}),
            cli("config-gcp-project-check", "check", "--json", **config(GOOD_CONFIGS["gcp-project"])),
            cli("config-vm-small-footprint", "plan", "cpu-small", "--duration", "20s", "--footprint-gb", "30",
                **config(GOOD_CONFIGS["vm-small"])),
            cli("config-xdg-default", "plan", "gpu-2", "--json", files={"~/.config/eps/config.toml":
                GOOD_CONFIGS["caps"]}),
            cli("config-missing-file", "plan", "gpu-1", env={"EPS_CONFIG": "{TMP}/nope.toml"}),
            cli("config-caps-env", "plan", "gpu-2", "--json",
                **{**config(GOOD_CONFIGS["caps"]), "env": {"EPS_CONFIG": "{TMP}/work/config.toml",
                                                           "EPS_FELLOWS_QUEUE_WAIT_SECONDS": "60"}})]  # fmt: skip
    for name, text in BAD_CONFIGS.items():
        out.append(cli(f"bad-config-{name}", "plan", "gpu-1", "--duration", "3h", **config(text)))
    for name in ("not-toml", "lanes-typo", "notify-url", "supervise"):
        text = BAD_CONFIGS[name]
        out += [cli(f"bad-config-{name}-json", "plan", "gpu-1", "--json", **config(text)),
                cli(f"bad-config-{name}-status", "status", **config(text)),
                cli(f"bad-config-{name}-check", "check", "--json", **config(text)),
                cli(f"bad-config-{name}-execute", "execute", "cpu-small", "--duration", "20s", "--", "true",
                    **config(text))]  # fmt: skip
    caps = {"120": {"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "120"},
            "120-30": {"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "120", "EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": "30"},
            "forms": {"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "10m", "EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": "00:02:00"},
            "next-900": {"EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": "900"}, "zero": {"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "0"},
            "bad": {"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "soon"}, "neg": {"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "-5"},
            "next-bad": {"EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": "x"}}  # fmt: skip
    for name, env in caps.items():
        out.append(cli(f"env-caps-{name}", "plan", "gpu-2", "--duration", "1h", "--json", env=env))
    out.append(cli("env-caps-text", "plan", "gpu-1", "--duration", "1h", env=caps["120-30"]))
    out.append(cli("env-caps-bad-text", "plan", "gpu-1", env=caps["bad"]))
    for cols in ("40", "80", "200"):
        out.append(cli(f"columns-{cols}", "plan", "cpu-small", "--duration", "30m", env={"COLUMNS": cols}))
    out += [cli("columns-80-wide", "plan", "gpu-1", "--wide", env={"COLUMNS": "80"}),
            cli("columns-80-intents", "intents", env={"COLUMNS": "80"}),
            cli("columns-unset", "plan", "gpu-1", "--duration", "2h", env={"COLUMNS": None}),
            cli("no-state-dir-env", "status", env={"EPS_STATE_DIR": None}),
            cli("gcp-credentials-missing", "check", "--json",
                **{**config(GOOD_CONFIGS["gcp-project"]), "env": {"EPS_CONFIG": "{TMP}/work/config.toml",
                   "GOOGLE_APPLICATION_CREDENTIALS": "{TMP}/nope.json"}}),
            cli("gcp-credentials-missing-plan", "plan", "cpu-small", "--duration", "2h",
                **{**config(GOOD_CONFIGS["gcp-project"]), "env": {"EPS_CONFIG": "{TMP}/work/config.toml",
                   "GOOGLE_APPLICATION_CREDENTIALS": "{TMP}/nope.json"}})]  # fmt: skip
    return out


def _commands() -> list[Case]:
    out = [cli("intents", "intents"), cli("intents-json", "intents", "--json"),
           cli("intents-wide", "intents", "--wide"),
           cli("check", "check"), cli("check-json", "check", "--json"), cli("check-timeout", "check", "--timeout", "1"),
           cli("check-timeout-bad", "check", "--timeout", "soon"),
           cli("status", "status"), cli("status-json", "status", "--json"),
           cli("status-active", "status", "--active", "--since", "2d"),
           cli("status-intent", "status", "--intent", "gpu-1", "--json"), cli("status-all", "status", "--all"),
           cli("status-limit", "status", "--limit", "5"), cli("status-since-bad", "status", "--since", "soon"),
           cli("status-intent-bad", "status", "--intent", "gpu1"), cli("status-two", "status", "a", "b"),
           cli("cancel-all", "cancel", "--all"), cli("cancel-all-json", "cancel", "--all", "--json"),
           cli("cancel-nothing", "cancel"), cli("reconcile", "reconcile"), cli("reconcile-json", "reconcile", "--json"),
           cli("supervise", "supervise"), cli("supervise-json", "supervise", "--json"),
           cli("notify-test", "notify", "test"), cli("notify-test-json", "notify", "test", "--json"),
           cli("notify-bare", "notify"),
           cli("notify-test-refused", "notify", "test", **config(GOOD_CONFIGS["notify-ok"])),
           cli("notify-test-bad-scheme", "notify", "test", "--json",
               **config('[notify]\nurls = ["nosuchscheme://host/x"]\n')),
           cli("schema", "schema"), cli("schema-bad", "schema", "plans"), cli("guide", "guide"),
           cli("completion-bash", "completion", "bash"), cli("completion-zsh", "completion", "zsh"),
           cli("completion-fish", "completion", "fish"), cli("completion-none", "completion"),
           cli("complete-intents", "_complete", "plan", "gpu-"),
           cli("complete-pin", "_complete", "plan", "gpu-1", "--pin", "f"),
           cli("mcp-tools", "mcp", "--tools"),
           cli("simulate-no-sacct", "simulate", "--since", "7d", "--caps", "600,300", "--caps", "300,120"),
           cli("simulate-no-sacct-json", "simulate", "--json"),
           cli("simulate-missing", "simulate", "--sacct", "missing.txt"),
           cli("simulate-bad-file", "simulate", "--sacct", "bad.txt", "--json",
               files={"bad.txt": "nope\n"})]  # fmt: skip
    out += [cli(f"schema-{s}", "schema", s) for s in SCHEMAS]
    sacct = {"fixtures": {"sacct.txt": "fellows-sacct.txt"}}
    out += [cli("simulate-sacct", "simulate", "--sacct", "sacct.txt", **sacct),
            cli("simulate-sacct-json", "simulate", "--sacct", "sacct.txt", "--json", **sacct),
            cli("simulate-sacct-caps", "simulate", "--sacct", "sacct.txt", "--caps", "600,300", "--caps", "300,120",
                "--caps", "900,300", "--rounds", "20", **sacct),
            cli("simulate-sacct-all-jobs", "simulate", "--sacct", "sacct.txt", "--all-jobs", "--seed", "3", **sacct),
            cli("simulate-sacct-inf", "simulate", "--sacct", "sacct.txt", "--caps", "inf,300", "--json", **sacct),
            cli("simulate-caps-bad", "simulate", "--sacct", "sacct.txt", "--caps", "10m", **sacct),
            cli("simulate-cluster-bad", "simulate", "--sacct", "sacct.txt", "--cluster", "nope", **sacct)]  # fmt: skip
    # every command that names a dispatch, of a dispatch no ledger holds (an empty state dir)
    unknown = {"status": ("status", UNKNOWN), "cancel": ("cancel", UNKNOWN), "wait": ("wait", UNKNOWN),
               "wait-timeout": ("wait", UNKNOWN, "--timeout", "5m"), "logs": ("logs", UNKNOWN),
               "logs-f": ("logs", "-f", UNKNOWN), "logs-tail": ("logs", UNKNOWN, "--tail", "50"),
               "logs-offset": ("logs", UNKNOWN, "--offset", "65536"), "pull": ("pull", UNKNOWN),
               "pull-to": ("pull", UNKNOWN, "--to", "results/"), "attach": ("attach", UNKNOWN),
               "attach-timeout": ("attach", UNKNOWN, "--timeout", "2m"), "ssh": ("ssh", UNKNOWN),
               "ssh-cmd": ("ssh", UNKNOWN, "--", "nvidia-smi"), "resume": ("execute", "--resume", UNKNOWN)}  # fmt: skip
    for name, argv in unknown.items():
        out.append(cli(f"unknown-{name}", *argv))
        out.append(cli(f"unknown-{name}-json", *argv, "--json"))
    out += [cli("bad-id-wait", "wait", "not-an-id"), cli("bad-id-logs-json", "logs", "x y", "--json"),
            cli("example-id-cancel", "cancel", "e1a2b3c4d5"), cli("wait-bad-timeout", "wait", UNKNOWN, "--timeout",
                                                                    "soon")]  # fmt: skip
    return out


def _execute() -> list[Case]:
    """Refusals (nothing runs) and no_usable_lane ends (the lanes are down here)."""
    ex = ("execute", "cpu-small", "--duration", "20s")
    refusals = {
        "detach-wait": (*ex, "--detach", "--wait", "--", "true"),
        "detach-follow": (*ex, "--detach", "--follow", "--", "true"),
        "bogus": ("execute", "gpu-1", "--bogus", "--", "true"), "no-command": ex,
        "no-intent": ("execute", "--", "true"),
        "intent-typo": ("execute", "gpu1", "--", "true"), "duration-bad": ("execute", "cpu-small", "--duration", "soon",
        "--", "true"), "workdir-missing": (*ex, "--workdir", "nope", "--", "true"),
        "env-unset": (*ex, "--env", "HF_TOKEN", "--", "true"), "env-bad": (*ex, "--env", "=x", "--", "true"),
        "dispatch-id-bad": (*ex, "--dispatch-id", "x y", "--json", "--", "true"),
        "time-limit-bad": (*ex, "--time-limit", "soon", "--", "true"),
        "notify-env-unset": (*ex, "--notify", "env:NOPE_URL", "--", "true"),
        "notify-eps-var": (*ex, "--notify", "env:EPS_X", "--", "true"),
        "notify-bad-url": (*ex, "--notify", "nosuchscheme://x", "--", "true"),
        "storage-bad": (*ex, "--storage", "ftp://x/y", "--", "true"),
        "input-bad": (*ex, "--input", "nope", "--", "true"),
        "storage-no-credentials": (*ex, "--storage", "s3://bucket/eps", "--", "true"),
        "resume-with-command": ("execute", "--resume", UNKNOWN, "--", "true"),
        "pin-fellows-cpu": ("execute", "cpu-small", "--pin", "fellows", "--", "true"),
        "park-flag": (*ex, "--park", "high-eur=5m", "--", "true"),
        "job-missing": ("execute", "--job", "nope.toml", "--wait"),
        "job-readme": ("execute", "--job", "job.toml", "--wait"),
        "job-readme-token": ("execute", "--job", "job.toml", "--wait"),
        "readme-workdir": ("execute", "cpu-small", "--duration", "2h", "--workdir", ".", "--setup",
                           "pip install -r requirements.txt", "--env", "HF_TOKEN", "--wait", "--", "python analyse.py"),
        "gpu-no-lane": ("execute", "gpu-1", "--duration", "1h", "--wait", "--", "true"),
        "gpu-no-lane-json": ("execute", "gpu-1", "--duration", "1h", "--json", "--", "true"),
        "cpu-count-no-lane": ("execute", "cpu-small", "--count", "8", "--workdir", ".", "--",
                              "python shard.py $EPS_TASK_INDEX $EPS_TASK_COUNT"),
        "pin-gcp-no-project": ("execute", "cpu-small", "--duration", "20s", "--pin", "gcp", "--wait", "--", "true"),
        "nocap-no-lane": ("execute", "cpu-small", "--duration", "2h", "--retry", "no-capacity", "--", "true"),
    }  # fmt: skip
    files = {"job.toml": README_JOB, "requirements.txt": "\n", "analyse.py": "print(1)\n"}
    fanout = {"job-readme-token", "cpu-count-no-lane"}  # copies walked one at a time: their lines in one order
    out = []
    for name, argv in refusals.items():
        env: dict[str, str | None] = {"HF_TOKEN": "not-a-secret"} if name == "job-readme-token" else {}
        if name in fanout:
            env["EPS_CONFIG"] = "{TMP}/work/config.toml"
        more = {"config.toml": "[fanout]\nconcurrency = 1\n"} if name in fanout else {}
        out.append(cli(f"execute-{name}", *argv, files={**files, **more}, env=env))
    out.append(cli("execute-inline-notify", *ex, "--notify", "json://127.0.0.1:9/x", "--", "true",
                   **config('[jobs]\nsupervise = "inline"\n')))
    return out


def _vm_jobs() -> list[Case]:
    """Real jobs on the VM lane (a local subprocess), under the supervisor or inline."""
    ex = ("execute", "cpu-small", "--duration", "20s")
    quiet: dict[str, Any] = {"env": {"EPS_CONFIG": "{TMP}/work/config.toml"},
             "files": {"config.toml": "[jobs]\nsupervisor_idle_s = 2\nwait_poll_s = 0.05\n", "data/a.txt": "alpha\n",
                       ".epsignore": "skip.txt\n", "skip.txt": "never shipped\n"}}  # fmt: skip
    d = FIXED[0]
    return [
        seq("vm-echo", (*ex, "--dispatch-id", d, "--wait", "--", "echo hi"), ("status",), ("status", "--json"),
            ("status", d), ("logs", d), ("logs", d, "--json"), ("logs", d, "--tail", "1"), ("wait", d),
            ("wait", d, "--json"), ("pull", d, "--json"), ("cancel", d), ("status", d, "--json"),
            ("attach", d), ("status", UNKNOWN), ("execute", *ex[1:], "--dispatch-id", d, "--", "true"),
            slow=True, **quiet),
        seq("vm-exit3-json", (*ex, "--dispatch-id", FIXED[1], "--wait", "--json", "--",
                              "echo x > $EPS_OUTPUT_DIR/f; exit 3"), ("wait", FIXED[1]),
            ("pull", FIXED[1], "--to", "{TMP}/out"), ("status", "--all"), slow=True, **quiet),
        seq("vm-workdir-env", (*ex, "--dispatch-id", FIXED[2], "--workdir", ".", "--env", "FOO=bar", "--wait", "--",
                               "cat data/a.txt; ls; echo $FOO $EPS_TASK_INDEX $EPS_TASK_COUNT $EPS_RESTART_COUNT"),
            ("logs", FIXED[2]), slow=True, **quiet),
        seq("vm-time-limit", (*ex, "--dispatch-id", FIXED[5], "--time-limit", "1s", "--wait", "--", "sleep 30"),
            ("wait", FIXED[5], "--json"), slow=True, **quiet),
        seq("vm-inline", (*ex, "--dispatch-id", FIXED[3], "--wait", "--", "echo inline"), ("status", FIXED[3]),
            slow=True, **config('[jobs]\nsupervise = "inline"\n')),
        seq("vm-detach", (*ex, "--detach", "--json", "--", "sleep 0.5; echo done"), ("wait", "{D}", "--timeout", "30s"),
            ("logs", "{D}"), ("supervise", "--json"), slow=True, **quiet),
        seq("vm-cancel", (*ex, "--dispatch-id", FIXED[4], "--detach", "--", "sleep 60"), ("cancel", FIXED[4]),
            ("wait", FIXED[4]), ("status", FIXED[4], "--json"), slow=True, **quiet),
    ]


API = {
    "plan": "import eps, json\np = eps.plan(eps.Job('gpu-1', duration='2h'))\nprint(p)\nprint(p.can_start)\n"
            "print(json.dumps(p.to_dict()))",
    "plan-cpu": "import eps, json\np = eps.plan(eps.Job('cpu-small', duration='30m', count=3, restartable=True))\n"
                "print(json.dumps(p.to_dict(), indent=1))",
    "plan-unknown-duration": "import eps\nprint(eps.plan(eps.Job('gpu-1')))",
    "plan-retry": "import eps\nprint(eps.plan(eps.Job('gpu-1', duration='6h', restartable=True, "
                  "retry=('interruption', 'error'), max_restarts=5)))",
    "job-bad-intent": "import eps\ntry:\n    eps.Job('gpu1')\nexcept eps.JobError as e:\n"
                      "    print(type(e).__name__, e)",
    "job-bad-duration": "import eps\ntry:\n    eps.Job('gpu-1', duration='soon')\nexcept eps.JobError as e:\n"
                        "    print(type(e).__name__, e)",
    "job-bad-pin": "import eps\ntry:\n    eps.Job('gpu-1', backend='fellow')\nexcept eps.JobError as e:\n"
                   "    print(type(e).__name__, e)",
    "job-bad-retry": "import eps\ntry:\n    eps.Job('cpu-small', retry=('preempt',))\nexcept eps.JobError as e:\n"
                     "    print(type(e).__name__, e)",
    "execute-no-command": "import eps\nprint(eps.execute(eps.Job('cpu-small', duration='20s'), detach=True))",
    "execute-no-lane": "import eps\nr = eps.execute(eps.Job('gpu-1', duration='1h', command='true'), wait=True)\n"
                       "print(r.exit_code, r.error, r.state)",
    "status-empty": "import eps\nprint(eps.status())\nprint(eps.status(active=True))",
    "wait-unknown": "import eps\ntry:\n    print(eps.wait('e0000000000', timeout=1))\nexcept Exception as e:\n"
                    "    print(type(e).__name__, e)",
    "config-error": "import eps\ntry:\n    eps.plan(eps.Job('gpu-1'))\nexcept Exception as e:\n"
                    "    print(type(e).__name__, e)",
    "vm-job": "import eps\nr = eps.execute(eps.Job('cpu-small', duration='20s', command='echo api; exit 4'), "
              "wait=True, timeout='30s')\nprint(r.exit_code, r.error, [e['event'] for e in r.events])\n"
              "print(eps.wait(r.dispatches[0])['exit_code'])",
}  # fmt: skip


def _api() -> list[Case]:
    out = []
    for name, code in API.items():
        kw: dict[str, Any] = config("this is not toml [\n") if name == "config-error" else {}
        out.append(Case(f"api-{name}", kind="api", steps=((code,),), slow=name == "vm-job", **kw))
    return out


MCP_JOBS: list[dict[str, Any]] = [  # tests/mcp/test_mcp_server.py's JOBS, as tool arguments
    {"intent": "gpu-1", "duration": "3h"}, {"intent": "cpu-small", "duration": "20s"},
    {"intent": "cpu-small", "duration": "2h", "count": 3, "restartable": True},
    {"intent": "cpu-bigmem", "duration": "5h", "footprint_gb": 80.0},
    {"intent": "debug", "duration": "1h", "count": 2}, {"intent": "gpu-2", "pin": "runpod", "duration": "30m"},
    {"intent": "gpu-1", "duration": "1h", "park": "high-eur=700"},
    {"intent": "cpu-small"},
]  # fmt: skip


def tool(name: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    return ("tools/call", {"name": name, "arguments": arguments})


def _mcp() -> list[Case]:
    quiet: dict[str, Any] = {"env": {"EPS_CONFIG": "{TMP}/work/config.toml"},
                             "files": {"config.toml": "[jobs]\nsupervisor_idle_s = 2\nwait_poll_s = 0.05\n"}}
    plans = [tool("plan", **job) for job in MCP_JOBS]
    calls = (("tools/list", {}), *plans,
             tool("plan", intent="gpu1", duration="2h"), tool("plan", intent="gpu-1", duration="soon"),
             tool("plan", intent="gpu-1", pin="fellow"), tool("plan", intent="gpu-1", count=0),
             tool("plan", intent="cpu-small", duration="1h", park="high-eur=100s"), tool("plan"),
             tool("intents"), tool("check", timeout="5s"), tool("status"), tool("status", active=True, since="2d"),
             tool("wait", dispatch=UNKNOWN), tool("logs", dispatch=UNKNOWN), tool("pull", dispatch=UNKNOWN),
             tool("cancel", dispatch=UNKNOWN), tool("cancel", all=True), tool("next_events", timeout=0),
             tool("execute", intent="cpu-small", duration="20s"),
             tool("execute", intent="gpu1", duration="20s", command="true"),
             tool("execute", intent="cpu-small", duration="20s", command="true", workdir="nope"),
             tool("nope"), ("resources/list", {}), ("resources/read", {"uri": "eps://guide"}),
             ("resources/read", {"uri": "eps://intents"}), ("resources/read", {"uri": "eps://nope"}))  # fmt: skip
    job = "for i in 1 2 3; do echo line-$i; done; echo $EPS_TASK_COUNT > $EPS_OUTPUT_DIR/n; exit 3"
    vm = (tool("execute", intent="cpu-small", duration="20s", command=job), tool("wait", dispatch="{D}", timeout="30s"),
          tool("logs", dispatch="{D}"), tool("logs", dispatch="{D}", offset=0, max_bytes=10),
          tool("logs", dispatch="{D}", lines=2), tool("logs", dispatch="{D}", max_bytes=0),
          tool("status", dispatch="{D}"), tool("pull", dispatch="{D}", to="{TMP}/out"),
          tool("cancel", dispatch="{D}"), tool("wait", dispatch="{D}", timeout=10_000))  # fmt: skip
    return [Case("mcp-doors", kind="mcp", calls=calls, slow=True, own_pids=True),
            Case("mcp-vm", kind="mcp", calls=vm, slow=True, **quiet)]


def build() -> list[Case]:
    out = [*_help(), *_plans(), *_settings(), *_commands(), *_execute(), *_vm_jobs(), *_api(), *_mcp()]
    out = [c._replace(own_pids=True) if c.name.startswith(("reconcile", "cancel-all")) else c for c in out]
    names = [c.name for c in out]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"case names used twice: {sorted(dupes)}")
    return out
