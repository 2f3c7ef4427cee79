"""Notifications (``[notify]``): the supervisor tells people what happened to their
dispatches through apprise targets.

- :mod:`eps.shell.config.notify` (outside this package, read with every config): the
  section, the event table, how a target is named;
- :mod:`~eps.shell.notify.notices`: a dispatch's event log folded into notices (pure);
- :mod:`~eps.shell.notify.book`: the ledger's rows (which dispatches owe, each target's cursor);
- :mod:`~eps.shell.notify.targets`: apprise (parse a URL, send one notice);
- :mod:`~eps.shell.notify.pump`: the supervisor's sender (once per event, at least once);
- :mod:`~eps.shell.notify.keep`: the hand-over (URLs checked; the kept config without them);
- :mod:`~eps.shell.notify.trial`: ``eps notify test``.

Nothing here is imported by ``eps plan``.
"""
