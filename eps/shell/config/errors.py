"""The one error of every user file eps reads, and the config's duration reader: a module of
their own, so that each config section's module (``[storage]``, ``[notify]``) can raise it
without importing the settings records that hold those sections."""

from eps.core.durations import parse_duration


class ConfigError(ValueError):
    """A config file, snapshot, grants file or environment value is malformed.  One line."""


def duration_setting(source: str, where: str, value: str | int | None) -> int | None:
    """A positive duration of the config file, read like ``--duration`` (``"20s"``, ``"7d"``,
    or whole seconds); ``None`` when absent.  :class:`ConfigError` (one line) otherwise."""
    if value is None:
        return None
    try:
        seconds = parse_duration(str(value))
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc} @ $.{where}") from None
    if seconds <= 0:
        raise ConfigError(f"{source}: must be positive @ $.{where}")
    return seconds
