"""``eps status`` says where each dispatch's outputs live now (issue 33): pulled here, with
the directory, in --json and in the table (every other case is the core's table,
tests/core/test_outputs_where.py; storage's in tests/shell/faults/test_faults_storage.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _valid(doc: dict[str, Any]) -> None:
    import jsonschema

    import eps

    schema = json.loads((Path(eps.__file__).parent / "schemas" / "status.json").read_text())
    jsonschema.validate(doc, schema)


def test_status_says_where_the_outputs_live(eps: Any) -> None:
    rc, out, err = eps("execute", "cpu-small", "--duration", "20s", "--wait", "--",
                       'echo 1 > "$EPS_OUTPUT_DIR/n"')  # fmt: skip
    assert rc == 0, (out, err)
    rc, out, _ = eps("status", "--json")
    doc = json.loads(out)
    _valid(doc)
    rows = {r["dispatch"]: r for r in doc["dispatches"]}
    [done] = [d for d, r in rows.items() if r["intent"] == "cpu-small"]
    assert rows[done]["outputs"] == {"where": "pulled", "at": str(eps.state / "outputs" / done)}
    assert (Path(rows[done]["outputs"]["at"]) / "n").read_text() == "1\n"
    rc, text, _ = eps("status", "--wide")
    assert rc == 0 and "outputs" in text.splitlines()[0] and "pulled" in text
