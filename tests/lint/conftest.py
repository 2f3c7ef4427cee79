"""The fixture trees hold Python files (a code table, stand-in tests): data, not tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from lintkit import copy_clean

collect_ignore = ["fixtures"]


@pytest.fixture
def clean_tree(tmp_path: Path) -> Path:
    return copy_clean(tmp_path)
