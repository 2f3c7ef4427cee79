"""The version of eps (``eps --version``, ``eps.__version__``); a test keeps it equal to pyproject.toml's."""

__version__ = "0.1.0"
