"""Helpers for the remote transport tests (imported by name, unlike conftest modules):
the test sshd's helper module (tests/shell/ssh/ssh_support.py, loaded by path) and a
recording runner."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from attrs import define, field

from eps.shell.remote.process import Completed, run_process, stream_process

HERE = Path(__file__).parent


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ssh_support = _load("ssh_support", HERE.parent / "ssh" / "ssh_support.py")


@define
class Call:
    argv: list[str]
    stdin: bytes | None
    result: Completed | None = None


@define
class Recorder:
    """A runner (and streamer) that runs for real and keeps what went through it."""

    calls: list[Call] = field(factory=list)
    streamed: list[list[str]] = field(factory=list)

    def __call__(self, argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float | None = None) -> Completed:
        call = Call(list(argv), stdin)
        self.calls.append(call)
        call.result = run_process(argv, stdin=stdin, timeout_s=timeout_s)
        return call.result

    def stream(self, argv: Sequence[str], sink: Callable[[bytes], None]) -> int:
        self.streamed.append(list(argv))
        return stream_process(argv, sink)

    def argv_text(self) -> str:
        return "\n".join(" ".join(c.argv) for c in self.calls) + "\n".join(" ".join(a) for a in self.streamed)

    def output_text(self) -> str:
        return "\n".join(c.result.stdout + c.result.stderr for c in self.calls if c.result is not None)
