"""What the code says: the facts the written policy is checked against.

:class:`PolicyFacts` gathers, from the code tables, everything a rule or a
generated block needs: the intents, the lane orders, the clusters with their
QoS ladders and park caps, the worst case computed by
``eps.core.tables.ladder_worst_case_s``, the router's docstring (a document the
rules read like CLAUDE.md), the pending-reason sets and the terminal and skip
codes.

Two sources:

- :func:`load_facts` with no argument imports ``eps.core.tables``,
  ``eps.core.router`` and ``eps.core.model`` (the real repository);
- :func:`load_facts` with a path loads a small code-table module, as fixture
  trees do.  That module must define ``DEFAULT_POLICY`` (an
  ``eps.core.model.Policy``); it may define ``DEFAULT_GRANTS``,
  ``NEVER_RUNS_REASONS``, ``SELF_CAP_REASONS``, ``TERMINALS``, ``SKIP_CODES``
  and ``ladder_worst_case_s``; whatever it leaves out comes from the real core.
  Its own module docstring plays the router's docstring, and the codes it
  produces are the ``SkipCode.X`` / ``Terminal.X`` it uses (the real core: every
  module of ``eps/core``).

Tests may also build a :class:`PolicyFacts` directly and hand it to
``eps.lint.cli.main``.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from attrs import frozen

from eps.core.model import ClusterConfig, Intent, Policy, QosGrants, QosTier, Resource
from eps.core.tables import JOB_LIFECYCLE, JobLifecycle, park_cap_env

#: The standing asks of SPEC.md.  Each must be stated in the docs and named by a test.
ASKS: tuple[str, ...] = tuple(f"P{i}" for i in range(1, 14))

#: The retired hard terminal whose reversal (P3) the docs must state.
RETIRED_TERMINAL = "cpu_exhausted_no_runpod_lane"


class FactsError(Exception):
    """The code tables cannot be loaded (bad ``--tables`` module).  A usage error."""


@frozen
class PolicyFacts:
    """The code side of every comparison.  ``router_path`` is where the router
    docstring lives (absolute) and ``router_line`` the file line its text starts on."""

    policy: Policy
    grants: QosGrants
    worst_case: tuple[tuple[str, int], ...]  # (cluster, seconds) for clusters with a ladder
    router_doc: str
    router_path: Path
    router_line: int
    never_runs: frozenset[str]
    self_cap: frozenset[str]
    terminals: tuple[str, ...]
    skip_codes: tuple[str, ...]
    tables_path: Path | None = None  # the code-table module (scanned for dollar caps in fixtures)
    #: Terminal and skip codes some code path can produce (see :func:`produced_codes`);
    #: ``None`` when unknown (facts built by hand), and then EPS114 checks nothing.
    produced: frozenset[str] | None = None
    #: The numbers of a job's life on its machine (time-limit margin, linger, workdir limit).
    lifecycle: JobLifecycle = JOB_LIFECYCLE
    #: Flex-start's maximum run duration (``FLEX_START_MAX_RUN_S``), P11.
    flex_start_max_s: int = 7 * 86_400

    def worst_case_s(self, cluster: str) -> int | None:
        return dict(self.worst_case).get(cluster)

    @property
    def ladder_clusters(self) -> tuple[ClusterConfig, ...]:
        return tuple(c for c in self.policy.clusters if c.qos_ladder)

    def intent_lanes(self, intent: Intent) -> tuple[str, ...]:
        """The automatic lanes of an intent: the GPU or the CPU lane order (as ``eps intents`` shows)."""
        if intent.resource is Resource.GPU:
            return self.policy.gpu_lane_order
        return self.policy.cpu_lane_order

    def tiers(self, cluster: str) -> dict[str, QosTier]:
        return {t.name: t for t in self.grants.tiers(cluster)}


def env_stem(cluster: str) -> str:
    """The environment prefix of a cluster's settings (from ``eps.core.tables.park_cap_env``)."""
    return park_cap_env(cluster)[0].removesuffix("_QUEUE_WAIT_SECONDS")


def park_cap_settings(cluster: ClusterConfig) -> tuple[tuple[str, int], tuple[str, int]]:
    """(setting, seconds) for rung 1 and for rungs 2+ of ``cluster``."""
    stem = env_stem(cluster.name)
    return (
        (f"{stem}_QUEUE_WAIT_SECONDS", cluster.first_park_cap_s),
        (f"{stem}_NEXT_QUEUE_WAIT_SECONDS", cluster.next_park_cap_s),
    )


def _docstring(path: Path) -> tuple[str, int]:
    """A module's docstring as written (unprocessed) and the line its text starts on."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return "", 1
    if tree.body:
        node = tree.body[0]
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value, node.lineno
    return "", 1


#: The enums whose members are the codes a plan shows: ``SkipCode.X`` and ``Terminal.X``.
CODE_ENUMS: tuple[str, ...] = ("SkipCode", "Terminal")


def produced_codes(paths: list[Path]) -> frozenset[str]:
    """The terminal and skip codes the Python files at ``paths`` can produce: every
    ``SkipCode.X`` / ``Terminal.X`` they use, except as an operand of a comparison
    (``s.code is not SkipCode.X`` tests a code, it does not produce one).  ``X`` maps to
    the member's value (``SkipCode.NOT_PINNED`` -> ``not_pinned``)."""
    from eps.core import model

    out: set[str] = set()
    for path in paths:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        tested = {
            id(operand)
            for node in ast.walk(tree)
            if isinstance(node, ast.Compare)
            for operand in (node.left, *node.comparators)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in CODE_ENUMS
                and id(node) not in tested
            ):
                member = getattr(getattr(model, node.value.id), node.attr, None)
                out.add(member.value if member is not None else node.attr.lower())
    return frozenset(out)


def _load_module(path: Path) -> ModuleType:
    name = f"_eps_lint_tables_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FactsError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except FileNotFoundError:
        raise FactsError(f"{path}: no such file") from None
    except Exception as exc:  # a broken fixture module is a usage error, not a crash
        raise FactsError(f"{path}: cannot import: {type(exc).__name__}: {exc}") from None
    finally:
        sys.modules.pop(name, None)
    return module


def load_facts(tables: Path | None = None) -> PolicyFacts:
    """Facts from the real core (``tables is None``) or from a small code-table module."""
    from eps.core import model, router
    from eps.core import tables as real

    source: Any = real
    router_file = Path(router.__file__)
    if tables is not None:
        source = _load_module(tables)
        router_file = tables
        if not isinstance(getattr(source, "DEFAULT_POLICY", None), Policy):
            raise FactsError(f"{tables}: defines no DEFAULT_POLICY (an eps.core.model.Policy)")
    policy: Policy = source.DEFAULT_POLICY
    grants: QosGrants = getattr(source, "DEFAULT_GRANTS", real.DEFAULT_GRANTS if tables is None else QosGrants())
    worst: Callable[[ClusterConfig], int] = getattr(source, "ladder_worst_case_s", real.ladder_worst_case_s)
    doc, line = _docstring(router_file)
    # The real core: every module of eps/core; a code-table module: that file alone.
    scanned = sorted(router_file.parent.glob("*.py")) if tables is None else [tables]
    return PolicyFacts(
        policy=policy,
        grants=grants,
        worst_case=tuple((c.name, worst(c)) for c in policy.clusters if c.qos_ladder),
        router_doc=doc,
        router_path=router_file.resolve(),
        router_line=line,
        never_runs=frozenset(getattr(source, "NEVER_RUNS_REASONS", router.NEVER_RUNS_REASONS)),
        self_cap=frozenset(getattr(source, "SELF_CAP_REASONS", router.SELF_CAP_REASONS)),
        terminals=tuple(getattr(source, "TERMINALS", tuple(t.value for t in model.Terminal))),
        skip_codes=tuple(getattr(source, "SKIP_CODES", tuple(s.value for s in model.SkipCode))),
        tables_path=None if tables is None else tables.resolve(),
        produced=produced_codes(scanned),
        lifecycle=getattr(source, "JOB_LIFECYCLE", real.JOB_LIFECYCLE),
        flex_start_max_s=int(getattr(source, "FLEX_START_MAX_RUN_S", real.FLEX_START_MAX_RUN_S)),
    )
