"""The ledger's errors, light (the front doors' error table reads them on every command)."""


class LedgerError(RuntimeError):
    """The ledger cannot be used (read-only, full, corrupt, foreign).  One line."""


class StateUnreachable(LedgerError):
    """The ledger's database cannot be reached (its server is down, refused us, or is unknown):
    an environment failure, not bad input.  One line, the URL without its password."""
