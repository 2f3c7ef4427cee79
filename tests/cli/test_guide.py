"""`eps guide` prints the agent guide shipped in the package; its facts are the code's."""

from __future__ import annotations

from pathlib import Path

import pytest

from eps.core.contract import EXIT_TABLE, TOOLS
from eps.shell.cli import main

GUIDE = Path(__file__).resolve().parents[2] / "eps" / "guide.md"


def test_eps_guide_prints_the_shipped_guide(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["guide"], env={"HOME": str(tmp_path)})
    out = capsys.readouterr().out
    assert rc == 0 and out == GUIDE.read_text()
    for name, _ in TOOLS:
        assert f"| `{name}`" in out
    for code, name, _ in EXIT_TABLE:
        assert f"| `{code}`" in out and name in out
    assert "NAME=VALUE" in out and "tight loop" in out and "mcpServers" in out
