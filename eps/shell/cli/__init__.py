"""The ``eps`` command line: argument parsing (:mod:`.main`), the commands that act
(:mod:`.commands`), and how things look (:mod:`.views`, :mod:`.progress`)."""

from eps.shell.cli.main import entry, main

__all__ = ["entry", "main"]
