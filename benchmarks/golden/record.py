"""The golden record of eps's front doors: the same argv/env/config cases, the same stdout,
stderr and exit code, byte for byte, before and after a change (issue 32); and the same MCP
tool results and Python API results for the same inputs.

Usage (from the repository root, with the venv that has eps's test dependencies)::

    .venv/bin/python benchmarks/golden/record.py --rev 7436e0a --out /tmp/before.json
    .venv/bin/python benchmarks/golden/record.py --repo . --out /tmp/after.json
    .venv/bin/python benchmarks/golden/record.py --compare /tmp/before.json /tmp/after.json

``--repo PATH`` records the eps source tree at PATH (a checkout or a ``git worktree`` of any
commit); ``--rev REV`` makes a temporary ``git worktree`` of REV in this script's repository,
records it and removes it.  ``--compare A B`` prints every case that differs (a unified diff
of stdout and stderr, both exit codes) and exits 1, or prints ``N cases identical`` and exits 0.
``--only SUBSTRING`` records only the cases whose name contains it (for a quick look).

How eps is run: this interpreter (``--python``), ``PYTHONPATH=<launcher dir>:PATH`` and
``-m eps_golden_launch``, a launcher written to a temp dir that refuses to run unless ``eps``
is imported from PATH, then calls ``eps.shell.cli.main:entry`` or, when that is gone, the
console script ``[project.scripts] eps`` of PATH/pyproject.toml.  The MCP server is
``eps mcp`` spoken to over stdio (JSON-RPC: initialize, then one request per call); the
Python API cases run a short snippet under the same launcher.

Isolation, the same for every case: a fresh temp dir with ``HOME``, ``XDG_{CONFIG,STATE,
CACHE,DATA}_HOME``, ``XDG_RUNTIME_DIR`` and ``EPS_STATE_DIR`` inside it, the case's files in
its ``work/`` (the cwd); an environment built from nothing (``env -i``): no RUNPOD_API_KEY,
no GCP or AWS credentials, ``USER=golden``, ``TZ=UTC``, ``COLUMNS=100``, ``LANG=C.UTF-8``;
``PATH`` is one directory of links to every program of /usr/local/bin, /usr/bin and /bin
except the SLURM clients (sbatch, squeue, sacct, ...), so fellows is "not configured" and no
case can reach the real SLURM cluster; no case names a host that exists, so nothing reaches
the internet.  A supervisor a case started (its state dir's supervisor.pid, its command line
naming that state dir) is killed when the case ends.  The cases that look at the whole
machine (``reconcile``, ``cancel --all`` and the MCP session that cancels all: every eps
VM-lane job on it is listed, as ``foreign`` when another state dir owns it) run in a PID
namespace of their own (``unshare --pid --fork --mount-proc``, as root), where the VM jobs
of other cases and of a test session running meanwhile are not.

Normalisation: only what must vary between two runs of the same code, applied to stdout,
stderr and MCP/API results alike, in this order:

1. the case's temp dir -> ``<TMP>``; the record's temp root -> ``<ROOT>``; PATH -> ``<REPO>``.
2. dispatch ids eps made (``e`` + 10 hex digits, not given in the case's own argv or
   arguments) -> ``<D1>``, ``<D2>``, ... in order of first appearance within the case.
3. wall-clock times: ISO-8601 date-times within 3 days of the recording -> ``<TIME>``;
   status tables' ``MM-DD HH:MM`` -> ``<MM-DD HH:MM>``; JSON numbers under a key ``ts`` or
   ending in ``_at`` -> ``<T>``.
4. process ids: JSON ``"pid"``, a VM handle's ``"id"``/``"handle"`` (digits only),
   ``id=<digits>``, ``pid <digits>`` and ``vm local <digits>`` -> ``<PID>``.
5. durations of the run itself: JSON ``runtime_s``, ``waited_s``, ``list_cost`` numbers
   -> ``<S>``, and ``(1.23 s)`` answer times -> ``(<S> s)``.
6. an internal error's traceback file, ``eps-crash-<random>.txt`` -> ``eps-crash-<X>.txt``.
7. the MCP server's stderr: the ``[MM/DD/YY HH:MM:SS]`` time column of the SDK's log
   records -> blanks of its width (the SDK leaves it blank when the second repeats).

A dispatch id in the arguments of a recorded MCP call is stored as written in the case
(``{D}``, ``{TMP}``), not as it was sent.

Nothing else is normalised: a changed word, column width, key order or exit code differs.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as case_list  # the cases module beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
SLURM_CLIENTS = frozenset(("sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol",
                           "scrontab", "sdiag", "sinfo", "sprio", "squeue", "sreport", "srun", "sshare", "sstat",
                           "strigger", "sview"))  # fmt: skip

LAUNCHER = """\
import os, sys
REPO = {repo!r}
sys.argv[0] = "eps"
import eps
if not os.path.realpath(eps.__file__).startswith(REPO + os.sep):
    sys.stderr.write(f"golden launcher: eps imported from {{eps.__file__}}, not {{REPO}}\\n")
    sys.exit(99)
if len(sys.argv) > 2 and sys.argv[1] == "--golden-api":
    code = sys.argv[2]
    del sys.argv[1:3]
    exec(compile(code, "<golden-api>", "exec"), {{"__name__": "__golden__"}})
    sys.exit(0)
try:
    from eps.shell.cli.main import entry
except ImportError:
    import importlib, tomllib
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        target = tomllib.load(fh)["project"]["scripts"]["eps"]
    module, _, attr = target.partition(":")
    entry = getattr(importlib.import_module(module), attr)
entry()
"""

DISPATCH = re.compile(r"\be[0-9a-f]{10}(?=\b|n\d+\b)")  # a copy of a --count N fan-out: <id>n<k>
ISO = re.compile(r"\b(\d{4}-\d\d-\d\d)[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b\d\d-\d\d \d\d:\d\d\b"), "<MM-DD HH:MM>"),
    (re.compile(r'"(ts|\w+_at)": \d+(?:\.\d+)?'), r'"\1": <T>'),
    (re.compile(r'"pid": \d+'), '"pid": <PID>'),
    (re.compile(r'"(id|handle)": "\d+"'), r'"\1": "<PID>"'),
    (re.compile(r"\bid=\d+\b"), "id=<PID>"),
    (re.compile(r"\bpid \d+\b"), "pid <PID>"),
    (re.compile(r"\bvm local \d+\b"), "vm local <PID>"),
    # the MCP SDK's log records on the server's stderr: rich leaves the time column blank when
    # the second repeats, so a time and a blank of its width are one thing
    (re.compile(r"^\[\d\d/\d\d/\d\d \d\d:\d\d:\d\d\]", re.M), " " * 19),
    (re.compile(r'"(runtime_s|waited_s|list_cost)": \d+(?:\.\d+)?'), r'"\1": <S>'),
    (re.compile(r"\(\d+\.\d+ s\)"), "(<S> s)"),
    (re.compile(r"\beps-crash-\w+\.txt\b"), "eps-crash-<X>.txt"),  # an internal error's traceback file (mkstemp)
)


class Normaliser:
    """The rules of the module docstring, for one case (its dispatch numbering is its own)."""

    def __init__(self, tmp: str, root: str, repo: str, given: str) -> None:
        self.paths = [(p, "<TMP>") for p in dict.fromkeys((os.path.realpath(tmp), tmp))]
        self.paths += [(p, "<ROOT>") for p in dict.fromkeys((os.path.realpath(root), root))]
        self.paths += [(p, "<REPO>") for p in dict.fromkeys((os.path.realpath(repo), repo))]
        self.given = set(DISPATCH.findall(given))
        self.ids: dict[str, str] = {}
        today = datetime.now(UTC).date()
        self.days = {str(today + timedelta(days=d)) for d in range(-3, 4)}

    def first_id(self) -> str | None:
        return next(iter(self.ids), None)

    def __call__(self, text: str) -> str:
        for path, mark in self.paths:
            text = text.replace(path, mark)
        text = DISPATCH.sub(self._dispatch, text)
        text = ISO.sub(lambda m: "<TIME>" if m.group(1) in self.days else m.group(0), text)
        for pattern, mark in RULES:
            text = pattern.sub(mark, text)
        return text

    def _dispatch(self, m: re.Match[str]) -> str:
        d = m.group(0)
        if d in self.given:
            return d
        return self.ids.setdefault(d, f"<D{len(self.ids) + 1}>")


def texts(answer: Any, norm: Normaliser) -> Any:
    """An MCP answer with the text of each of its contents normalised on its own (a tool's text
    is its JSON document; inside the dumped answer its quotes would be escaped)."""
    if isinstance(answer, dict):
        for item in [*answer.get("content", ()), *answer.get("contents", ())]:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                item["text"] = norm(item["text"])
    return answer


class Recorder:
    def __init__(self, repo: str, python: str, root: str) -> None:
        self.repo = os.path.realpath(repo)
        self.python = python
        self.root = root
        self.bin = os.path.join(root, "bin")
        self.launch = os.path.join(root, "launch")
        os.makedirs(self.bin)
        os.makedirs(self.launch)
        for d in ("/usr/local/bin", "/usr/bin", "/bin"):
            for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                f, link = os.path.join(d, name), os.path.join(self.bin, name)
                if name not in SLURM_CLIENTS and not os.path.lexists(link) and os.access(f, os.X_OK):
                    os.symlink(f, link)
        with open(os.path.join(self.launch, "eps_golden_launch.py"), "w") as fh:
            fh.write(LAUNCHER.format(repo=self.repo))

    # --- one case's world -------------------------------------------------------------------

    def world(self, case: case_list.Case) -> tuple[str, dict[str, str]]:
        tmp = tempfile.mkdtemp(prefix="c-", dir=self.root)
        home = os.path.join(tmp, "home")
        for d in ("home/.config", "home/.local/state", "home/.cache", "home/.local/share", "run", "work"):
            os.makedirs(os.path.join(tmp, d), mode=0o700)
        env = {
            "HOME": home, "USER": "golden", "LOGNAME": "golden",
            "XDG_CONFIG_HOME": os.path.join(home, ".config"), "XDG_STATE_HOME": os.path.join(home, ".local/state"),
            "XDG_CACHE_HOME": os.path.join(home, ".cache"), "XDG_DATA_HOME": os.path.join(home, ".local/share"),
            "XDG_RUNTIME_DIR": os.path.join(tmp, "run"), "EPS_STATE_DIR": os.path.join(tmp, "state"),
            "PATH": self.bin, "PYTHONPATH": f"{self.launch}{os.pathsep}{self.repo}",
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "COLUMNS": "100", "TERM": "dumb",
            "PYENV_REHASH_TIMEOUT": "1",
        }  # fmt: skip
        for key, value in case.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value.replace("{TMP}", tmp)
        for rel, content in case.files.items():
            path = os.path.join(home, rel[2:]) if rel.startswith("~/") else os.path.join(tmp, "work", rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(content.replace("{TMP}", tmp).replace("{REPO}", self.repo))
        for rel, fixture in case.fixtures.items():
            shutil.copyfile(case_list.fixture(self.repo, fixture), os.path.join(tmp, "work", rel))
        return tmp, env

    def tidy(self, tmp: str, env: dict[str, str]) -> None:
        """Kill the supervisor this case started (only one whose command line names its state dir)."""
        state = env.get("EPS_STATE_DIR") or os.path.join(tmp, "home/.local/state/eps")
        with contextlib.suppress(OSError, ValueError):
            with open(os.path.join(state, "supervisor.pid")) as fh:
                pid = int(fh.read().strip() or 0)
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                mine = state.encode() in fh.read()
            if pid > 0 and mine:
                os.kill(pid, signal.SIGKILL)
                for _ in range(100):
                    if not os.path.exists(f"/proc/{pid}"):
                        break
                    time.sleep(0.02)
        shutil.rmtree(tmp, ignore_errors=True)

    def eps(self, case: case_list.Case, argv: list[str]) -> list[str]:
        own = ["unshare", "--pid", "--fork", "--mount-proc"] if case.own_pids else []
        return [*own, self.python, "-m", "eps_golden_launch", *argv]

    def run(self, cmd: list[str], env: dict[str, str], cwd: str, timeout: float, stdin: str = "") -> dict[str, Any]:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            out, err = proc.communicate(stdin.encode(), timeout=timeout)
            code: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            code = "timeout"
        return {"stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace"), "exit": code}

    # --- the three kinds ----------------------------------------------------------------------

    def record(self, case: case_list.Case) -> list[tuple[str, dict[str, Any]]]:
        """Every result of ``case``; a case the recorder itself failed on is one result saying so."""
        try:
            return self._record(case)
        except Exception as exc:  # the record goes on; the failure is in it, and compare shows it
            return [(case.name, {"stdout": "", "stderr": f"golden recorder failed: {exc!r}", "exit": "recorder"})]

    def _record(self, case: case_list.Case) -> list[tuple[str, dict[str, Any]]]:
        tmp, env = self.world(case)
        norm = Normaliser(tmp, self.root, self.repo, json.dumps([case.steps, case.calls]))
        cwd = os.path.join(tmp, "work")
        try:
            if case.kind == "mcp":
                return self._mcp(case, env, cwd, norm)
            got = []
            for i, step in enumerate(case.steps):
                d = norm.first_id() or "e0000000000"
                real = {v: k for k, v in norm.ids.items()}.get(d, d)
                if case.kind == "api":
                    argv = ["--golden-api", step[0].replace("{TMP}", tmp).replace("{D}", real)]
                else:
                    argv = [a.replace("{TMP}", tmp).replace("{D}", real) for a in step]
                res = self.run(self.eps(case, argv), env, cwd, case.timeout, case.stdin)
                norm(res["stdout"] + res["stderr"])  # number the ids in the order they appear
                res = {"argv": list(step), "stdout": norm(res["stdout"]), "stderr": norm(res["stderr"]),
                       "exit": res["exit"]}  # fmt: skip
                got.append((case.name if len(case.steps) == 1 else f"{case.name}#{i + 1}", res))
            return got
        finally:
            self.tidy(tmp, env)

    def _mcp(self, case: case_list.Case, env: dict[str, str], cwd: str, norm: Normaliser) -> list[tuple[str, Any]]:
        proc = subprocess.Popen(
            self.eps(case, ["mcp"]), cwd=cwd, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True,
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:
            for x in proc.stdout or ():
                lines.put(x)

        threading.Thread(target=read, daemon=True).start()
        errs: list[str] = []
        threading.Thread(target=lambda: errs.extend(proc.stderr or ()), daemon=True).start()
        ids = iter(range(1, 10_000))

        def ask(method: str, params: dict[str, Any], timeout: float) -> Any:
            n = next(ids)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n")
            proc.stdin.flush()
            deadline = time.monotonic() + timeout
            while True:
                try:
                    msg = json.loads(lines.get(timeout=max(0.01, deadline - time.monotonic())))
                except queue.Empty:
                    return {"golden": "no answer in time"}
                if msg.get("id") == n:
                    return msg.get("result", msg.get("error"))

        got: list[tuple[str, Any]] = []
        try:
            hello = ask("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                       "clientInfo": {"name": "eps-golden", "version": "1"}}, case.timeout)  # fmt: skip
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
            proc.stdin.flush()
            got.append((f"{case.name}#0-initialize", {"result": norm(json.dumps(hello, indent=1))}))
            for i, (method, params) in enumerate(case.calls, 1):
                d = norm.first_id() or "e0000000000"
                real = {v: k for k, v in norm.ids.items()}.get(d, d)
                given = json.loads(json.dumps(params).replace("{D}", real).replace("{TMP}", os.path.dirname(cwd)))
                res = json.dumps(texts(ask(method, given, case.timeout), norm), indent=1, ensure_ascii=False)
                label = params.get("name", method) if method == "tools/call" else method
                got.append((f"{case.name}#{i}-{label}", {"call": [method, params], "result": norm(res)}))
        finally:
            if proc.stdin:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        got.append((f"{case.name}#stderr", {"stdout": "", "stderr": norm("".join(errs)), "exit": proc.returncode}))
        return got


def record(repo: str, out: str, python: str, only: str | None, workers: int) -> int:
    todo = [c for c in case_list.build() if only is None or only in c.name]
    t0 = time.monotonic()
    root = tempfile.mkdtemp(prefix="eps-golden-")
    try:
        rec = Recorder(repo, python, root)
        slow_first = sorted(todo, key=lambda c: (c.kind != "mcp", not c.slow))
        with ThreadPoolExecutor(workers) as pool:
            recorded = dict(zip((c.name for c in slow_first), pool.map(rec.record, slow_first), strict=True))
        flat: dict[str, Any] = {}
        for c in todo:  # in the cases' own order, whatever order they ran in
            flat.update(recorded[c.name])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    took = time.monotonic() - t0
    doc = {"repo": os.path.realpath(repo), "cases": flat, "seconds": round(took, 1)}
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    kinds = {k: sum(1 for c in todo if c.kind == k) for k in ("cli", "mcp", "api")}
    print(f"{len(flat)} results of {len(todo)} cases ({kinds}) in {took:.1f} s -> {out}")
    return 0


def compare(a_path: str, b_path: str) -> int:
    with open(a_path) as fh:
        a = json.load(fh)["cases"]
    with open(b_path) as fh:
        b = json.load(fh)["cases"]
    differ = 0
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x == y:
            continue
        differ += 1
        print(f"=== {name}")
        if x is None or y is None:
            print(f"  only in {a_path if y is None else b_path}")
            continue
        for part in ("stdout", "stderr", "result"):
            if x.get(part) != y.get(part):
                diff = difflib.unified_diff(
                    (x.get(part) or "").splitlines(keepends=True), (y.get(part) or "").splitlines(keepends=True),
                    f"{a_path}:{part}", f"{b_path}:{part}",
                )  # fmt: skip
                sys.stdout.writelines(line if line.endswith("\n") else line + "\n" for line in diff)
        if x.get("exit") != y.get("exit"):
            print(f"  exit: {x.get('exit')} != {y.get('exit')}")
        for key in sorted((set(x) | set(y)) - {"stdout", "stderr", "result", "exit"}):
            if x.get(key) != y.get(key):
                print(f"  {key}: {x.get(key)!r} != {y.get(key)!r}")
    if differ:
        print(f"{differ} of {len(set(a) | set(b))} cases differ")
        return 1
    print(f"{len(a)} cases identical")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--repo", help="record the eps source tree at PATH")
    g.add_argument("--rev", help="record REV of this script's repository (a temporary git worktree)")
    g.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two records")
    p.add_argument("--out", help="where the record goes (JSON)")
    p.add_argument("--python", default=sys.executable, help="the interpreter that runs eps (default: this one)")
    p.add_argument("--only", help="only the cases whose name contains this")
    p.add_argument("--workers", type=int, default=3, help="cases run at once (3)")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        p.error("--out is needed to record")
    if args.repo:
        return record(args.repo, args.out, args.python, args.only, args.workers)
    top = subprocess.run(["git", "-C", HERE, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    wt = tempfile.mkdtemp(prefix="eps-golden-rev-")
    os.rmdir(wt)
    subprocess.run(["git", "-C", top, "worktree", "add", "--detach", "-q", wt, args.rev], check=True)
    try:
        return record(wt, args.out, args.python, args.only, args.workers)
    finally:
        subprocess.run(["git", "-C", top, "worktree", "remove", "--force", wt], check=False)


if __name__ == "__main__":
    sys.exit(main())
