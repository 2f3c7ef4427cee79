"""A sweep's tasks on paid lanes and the VM, at most K alive at once (``--sweep-parallel K``;
docs/design/sweeps.md "On paid lanes: a task is a machine").

The walker's ``walk_copies`` hands a sweep with ``sweep_parallel`` here.  The pool is
``min(K, [fanout] concurrency)`` wide and a task holds its place from its walk to its end
(followed, pulled and released as the supervisor does), so a task that ends lets the next
one start; the tasks still to start stay ``walking`` (``pending`` in the sweep's progress).
Tasks already running (a revived supervisor) hold their places first.  When the walker's
``stop`` says so (the supervisor lets the sweep go), no further task starts: the next
owner walks them.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol, TypeVar

from eps.core.states import DispatchState

if TYPE_CHECKING:
    from eps.shell.config.settings import Settings
    from eps.shell.lanes import Lanes
    from eps.shell.state.events import Events
    from eps.shell.state.ledger import Ledger


class Walked(Protocol):
    """What of a walk's result this reads: whether something started."""

    @property
    def handle(self) -> object: ...


R = TypeVar("R", bound=Walked)
R_co = TypeVar("R_co", bound=Walked, covariant=True)


class Walking(Protocol[R_co]):
    """What of the walker the pool uses."""

    settings: Settings
    ledger: Ledger
    lanes: Lanes
    reporter: Events
    stop: Callable[[], bool] | None

    def walk_recorded(self, dispatch: str) -> R_co: ...


def walk_at_most(walker: Walking[R], parent: str, children: list[str], k: int) -> list[R]:
    """Walk the recorded tasks ``children`` of the sweep ``parent``, at most ``k`` alive at
    once; each walked task's result (the tasks only followed, or not started because the
    walker was told to stop, give none)."""
    from eps.shell.run.follow import follow_to_end

    ledger = walker.ledger
    running = [r.id for r in ledger.children(parent)
               if r.id not in children and r.state in (DispatchState.STARTED, DispatchState.HELD)]  # fmt: skip
    poll_s = walker.settings.jobs.wait_poll_s
    stop = walker.stop or (lambda: False)

    def follow(d: str) -> None:
        follow_to_end(ledger, walker.lanes, walker.reporter, [d], poll_s=poll_s, stop=stop,
                      sync=walker.stop is not None)  # fmt: skip

    def one(d: str) -> R | None:
        if d in running:
            follow(d)
            return None
        if stop():
            return None
        result = walker.walk_recorded(d)
        if result.handle is not None:
            follow(d)
        return result

    workers = max(1, min(k, walker.settings.fanout_concurrency, len(running) + len(children)))
    with ThreadPoolExecutor(max_workers=workers) as pool:  # takes the ids in order, one per free place
        return [r for r in pool.map(one, [*running, *children]) if r is not None]
