"""Plain-text tables that fit the terminal: what ``eps plan``, ``intents``, ``status`` and
``check`` print for people.

Why not rich here: importing and laying out a rich table costs about 40 ms, twice the
20 ms a text plan may cost over ``--json`` (issue 15; ``benchmarks/plan_text.py``
measures both); this is the small part of it eps needs.  Rules:

- the width is ``COLUMNS`` when set, else the terminal's, else 80 (what rich does when
  output is not a terminal); ``--wide`` (``width=None``) never wraps or cuts;
- when the natural table is wider, the *flexible* columns (a reason, a note) give up
  width first and wrap at word boundaries; when that would leave them narrower than
  :data:`MIN_FLEX`, they move to their own indented line under the row instead (a
  repeat of the row above's text is not printed again); other cells are cut with ``~``
  only if even that is not enough;
- no line ends in blanks (piped output has no padding); headers are bold only on a
  terminal that allows colour (``NO_COLOR`` unset).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence

from eps.core.records import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

GAP = "  "
MIN_FLEX = 24  # narrower than this, a flexible column goes to its own line under the row
INDENT = "    "


class Column(NamedTuple):
    header: str
    right: bool = False  # right-aligned (numbers)
    flex: bool = False  # may wrap to make the table fit
    keep: bool = False  # never cut (an id)


def width_for(stream: TextIO, env: Mapping[str, str], *, wide: bool = False) -> int | None:
    """The width to fit: ``None`` with ``wide``, else ``COLUMNS``, the terminal's, or 80."""
    if wide:
        return None
    cols = env.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        pass
    return 80


def styled(stream: TextIO, env: Mapping[str, str]) -> bool:
    try:
        return bool(stream.isatty()) and "NO_COLOR" not in env
    except (AttributeError, ValueError):
        return False


def _fit(natural: list[int], cols: Sequence[Column], width: int | None) -> list[int]:
    if width is None:
        return natural
    widths = list(natural)
    over = sum(widths) + len(GAP) * (len(widths) - 1) - width
    flex = [i for i, c in enumerate(cols) if c.flex]
    # Flexible columns give up width first (the widest first), down to MIN_FLEX.
    while over > 0 and flex:
        i = max(flex, key=lambda k: widths[k])
        room = widths[i] - MIN_FLEX
        if room <= 0:
            break
        give = min(room, over)
        widths[i] -= give
        over -= give
    # Then the widest other columns are cut, down to their header's width.
    while over > 0:
        cuttable = [k for k in range(len(widths)) if not cols[k].keep]
        if not cuttable:
            break
        i = max(cuttable, key=lambda k: widths[k] - len(cols[k].header))
        room = widths[i] - max(len(cols[i].header), 4)
        if room <= 0:
            break
        give = min(room, over)
        widths[i] -= give
        over -= give
    return widths


def _cell_lines(text: str, width: int, col: Column) -> list[str]:
    if len(text) <= width:
        return [text]
    if col.flex:
        return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
    return [text[: max(1, width - 1)] + "~"]


def render(cols: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None, *, bold: bool = False) -> str:
    """The table as text, one string ending in a newline (empty for no rows)."""
    if not rows:
        return ""
    fixed = [i for i, c in enumerate(cols) if not c.flex]
    if width is not None and len(fixed) < len(cols):
        natural = [max(len(cols[i].header), *(len(r[i]) for r in rows)) for i in fixed]
        left = width - sum(natural) - len(GAP) * len(fixed)
        if left < MIN_FLEX * (len(cols) - len(fixed)):
            return _spilled(cols, rows, width, fixed, bold=bold)
    return _inline(cols, rows, width, bold=bold)


def _spilled(
    cols: Sequence[Column], rows: Sequence[Sequence[str]], width: int, fixed: list[int], *, bold: bool
) -> str:
    """The fixed columns as a table, each flexible cell on its own lines under its row."""
    table = _inline([cols[i] for i in fixed], [[r[i] for i in fixed] for r in rows], width, bold=bold)
    lines = table.splitlines()
    out = [lines[0]]
    flex = [i for i in range(len(cols)) if i not in fixed]
    last: list[str] = []
    for row, line in zip(rows, lines[1:], strict=False):
        out.append(line)
        texts = [str(row[i]) for i in flex if str(row[i])]
        if texts and texts != last:
            for text in texts:
                out.extend(INDENT + x for x in textwrap.wrap(text, max(20, width - len(INDENT))))
        last = texts
    return "\n".join(out) + "\n"


def _inline(cols: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None, *, bold: bool) -> str:
    natural = [max(len(c.header), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    widths = _fit(natural, cols, width)
    out = []
    head = GAP.join(c.header.rjust(w) if c.right else c.header.ljust(w) for c, w in zip(cols, widths, strict=True))
    out.append(f"\x1b[1m{head.rstrip()}\x1b[0m" if bold else head.rstrip())
    for row in rows:
        cells = [_cell_lines(str(v), w, c) for v, w, c in zip(row, widths, cols, strict=True)]
        for k in range(max(len(x) for x in cells)):
            parts = []
            for lines, w, c in zip(cells, widths, cols, strict=True):
                v = lines[k] if k < len(lines) else ""
                parts.append(v.rjust(w) if c.right else v.ljust(w))
            out.append(GAP.join(parts).rstrip())
    return "\n".join(out) + "\n"
