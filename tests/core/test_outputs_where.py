"""Where a dispatch's outputs live now (``eps status``'s ``outputs.where``), as a table of the
facts the shell observes (issue 33: "bucket, machine, pulled, or lost")."""

from __future__ import annotations

import pytest

from eps.core.ends import OUTPUTS_WHERE, outputs_where
from eps.core.states import DispatchState as S

F = {"ran": True, "pulled": False, "stored": False, "kept": False, "synced": False}

CASES = [
    # state, facts that differ from F, where
    (S.FAILED, {"ran": False}, "none"),  # nothing started
    (S.WALKING, {"ran": False}, "none"),
    (S.HELD, {}, "none"),  # a pinned job still in its queue
    (S.STARTED, {}, "machine"),
    (S.STARTED, {"synced": True}, "machine"),  # the machine has the newer copy
    (S.INTERRUPTED, {"synced": True}, "machine"),  # preempted, its relaunch to come
    (S.ENDED, {"pulled": True}, "pulled"),
    (S.ENDED, {"pulled": True, "stored": True}, "pulled"),  # pulled from storage: the copy here first
    (S.ENDED, {"stored": True}, "storage"),
    (S.CANCELLED, {"stored": True}, "storage"),
    (S.ENDED, {"kept": True}, "machine"),  # a pull failed or was held back: the machine is kept
    (S.ENDED, {"kept": True, "synced": True}, "machine"),
    (S.ENDED, {"on_cluster": True}, "machine"),  # a SLURM job's shared filesystem keeps them
    (S.PREEMPTED, {"synced": True}, "synced"),  # the machine is gone; the last sync is here
    (S.PREEMPTED, {}, "lost"),
    (S.ENDED, {}, "lost"),
    (S.WAITING, {"synced": True}, "synced"),  # after a preemption, waiting for capacity to relaunch
]


@pytest.mark.parametrize(("state", "facts", "where"), CASES)
def test_where_the_outputs_live(state: S, facts: dict[str, bool], where: str) -> None:
    assert outputs_where(state, **{**F, **facts}) == where


def test_every_answer_is_a_word_of_the_table_and_the_schema_lists_them() -> None:
    import itertools
    import json
    from pathlib import Path

    import eps

    seen = {
        outputs_where(state, ran=a, pulled=b, stored=c, kept=d, synced=e, on_cluster=f)
        for state in S
        for a, b, c, d, e, f in itertools.product((False, True), repeat=6)
    }
    assert seen == set(OUTPUTS_WHERE)
    schema = json.loads((Path(eps.__file__).parent / "schemas" / "status.json").read_text())
    assert tuple(schema["$defs"]["row"]["properties"]["outputs"]["properties"]["where"]["enum"]) == OUTPUTS_WHERE
