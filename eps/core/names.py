"""The names eps gives what it creates, defined once.

Every SLURM job, GCE instance and RunPod pod eps makes carries :data:`PREFIX`
and the dispatch id, so that ``eps reconcile`` can find it again after a crash
by asking the provider for eps's names alone.  A dispatch id is a short
lowercase token (:data:`DISPATCH_ID`): it must fit a SLURM job name, a GCE
instance name and label value, and a pod name unchanged.

- SLURM job: ``eps-<dispatch>`` (one name per dispatch; the QoS tells the rungs apart), or
  ``eps-<dispatch>-<user>`` where the cluster row says ``user_in_job_name``
- RunPod pod: ``eps-<dispatch>-<attempt seq>``
- GCE instance: ``eps-<slug>-<digest>`` (see the GCP lane's wire module; the digest
  fixes the name per dispatch, rung and copy)
- a ``--count N`` copy: ``<parent>n<i>`` (i = 1..N)
"""

from __future__ import annotations

import re

from eps.core.model import Provisioning

#: What every provider-side name eps makes starts with.
PREFIX = "eps-"

#: The syntax of a dispatch id: a lowercase letter, then lowercase letters and digits.
#: Ids eps makes are ``e`` + 10 hex digits; ``--dispatch-id`` may name one of at most
#: :data:`USER_ID_MAX` characters so that the copies of a fan-out still fit.
DISPATCH_ID = re.compile(r"[a-z][a-z0-9]{2,47}")
USER_ID_MAX = 40


class BadName(ValueError):
    """A dispatch id that breaks :data:`DISPATCH_ID`.  One line."""


def check_dispatch_id(dispatch: str, *, user_given: bool = False) -> str:
    """``dispatch`` if it is a valid dispatch id; raises :class:`BadName` otherwise."""
    limit = USER_ID_MAX if user_given else 48
    if DISPATCH_ID.fullmatch(dispatch) is None or len(dispatch) > limit:
        raise BadName(
            f"dispatch id {dispatch!r}: use 3-{limit} characters, a lowercase letter first, "
            "then lowercase letters and digits"
        )
    return dispatch


def copy_id(parent: str, index: int) -> str:
    """The dispatch id of copy ``index`` (1-based) of a ``--count`` fan-out."""
    return f"{parent}n{index}"


_ARRAY_TASK = re.compile(r"[0-9]+_([0-9]+)")  # task i of SLURM array J: "J_i"


def task_of_array(owner: str | None, job_id: str) -> str | None:
    """Who a SLURM job named for ``owner`` belongs to: task i of a sweep's array (``J_i``)
    is the sweep's task row ``copy_id(owner, i + 1)``; any other job is ``owner``'s own."""
    task = _ARRAY_TASK.fullmatch(job_id)
    return copy_id(owner, int(task.group(1)) + 1) if owner is not None and task is not None else owner


def sweep_of_task(dispatch: str, job_id: str) -> str | None:
    """The sweep whose array task ``job_id`` (``J_i``) the task row ``dispatch`` is, else ``None``."""
    task = _ARRAY_TASK.fullmatch(job_id)
    if task is None:
        return None
    suffix = f"n{int(task.group(1)) + 1}"
    return dispatch[: -len(suffix)] if dispatch.endswith(suffix) and len(dispatch) > len(suffix) else None


def job_name(dispatch: str, user: str | None = None) -> str:
    """The SLURM job name of ``dispatch`` (``squeue --name`` finds it): ``eps-<dispatch>``, or
    ``eps-<dispatch>-<user>`` on a cluster whose people must see whose job it is (a dispatch
    id holds no ``-``, so the two parts never run together)."""
    base = PREFIX + check_dispatch_id(dispatch)
    return base if user is None else f"{base}-{user}"


def dispatch_of_job(name: str) -> str | None:
    """The dispatch id a SLURM job name carries (with or without its user), or ``None``
    when eps did not make it."""
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :].split("-", 1)[0]
    return rest if DISPATCH_ID.fullmatch(rest) else None


def pod_name(dispatch: str, seq: int) -> str:
    """The RunPod pod name of attempt ``seq`` of ``dispatch``."""
    return f"{PREFIX}{dispatch}-{seq}"


def pod_prefix(dispatch: str | None = None) -> str:
    """What the names of every pod of ``dispatch`` (or of every eps pod) start with."""
    return PREFIX if dispatch is None else f"{PREFIX}{dispatch}-"


def dispatch_of_pod(name: str) -> str | None:
    """The dispatch id a pod name carries, or ``None`` when eps did not make it."""
    if not name.startswith(PREFIX):
        return None
    dispatch, sep, seq = name[len(PREFIX) :].rpartition("-")
    if not sep or not seq.isdigit() or DISPATCH_ID.fullmatch(dispatch) is None:
        return None
    return dispatch


def rung_provisioning(key: str) -> Provisioning | None:
    """The provisioning a rung key (``lane/target/zone/provisioning``, see ``Rung.key``) names."""
    _, _, last = key.rpartition("/")
    try:
        return Provisioning(last)
    except ValueError:
        return None
