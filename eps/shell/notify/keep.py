"""The hand-over: a dispatch keeps its config file's text in the state directory (the settings
it is walked with, :func:`eps.shell.run.ownership.write_inputs`), and notification URLs carry
tokens, which never rest there.  :func:`kept_config` checks each ``[notify] urls`` entry with
apprise (a URL it cannot read is one line, exit 2, nothing recorded) and replaces it in the
kept text by a placeholder (:data:`PLACEHOLDER`); the supervisor takes the URLs from the
config file itself when it sends (:mod:`eps.shell.notify.pump`).
"""

from __future__ import annotations

import copy
import tomllib
from typing import Any

from eps.shell.config.errors import ConfigError
from eps.shell.notify.targets import parse

#: What stands for the i-th URL in a kept config (a URL in form: the section still reads).
PLACEHOLDER = "eps-kept://notify-target-{i}"


def _urls(data: dict[str, Any]) -> list[str]:
    notify = data.get("notify")
    urls = notify.get("urls") if isinstance(notify, dict) else None
    return [u for u in urls if isinstance(u, str)] if isinstance(urls, list) else []


def kept_config(text: bytes, source: str) -> bytes:
    """``text`` as it may be kept: its notification URLs checked and replaced (the rest
    byte for byte).  :class:`ConfigError` (one line, no URL) for a URL apprise cannot read,
    or one written so that it cannot be found in the text (TOML escapes in it)."""
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return text  # the config reader has said so already; nothing of it is sent anywhere
    urls = _urls(data)
    if not urls:
        return text
    parse([u.strip() for u in urls], source)
    out = text.decode("utf-8")
    for i, url in sorted(enumerate(urls), key=lambda p: -len(p[1])):
        out = out.replace(url, PLACEHOLDER.format(i=i))
    expected = copy.deepcopy(data)
    expected["notify"]["urls"] = [PLACEHOLDER.format(i=i) for i in range(len(urls))]
    try:
        same = tomllib.loads(out) == expected
    except tomllib.TOMLDecodeError:
        same = False
    if not same or any(url in out for url in urls):
        raise ConfigError(
            f"{source}: [notify] urls: write each URL as a plain TOML string, without escapes "
            "(eps keeps your config with each dispatch, with the URLs taken out) @ $.notify.urls"
        )
    return out.encode("utf-8")
