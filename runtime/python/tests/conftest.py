"""Shared paths of the package's tests: the repository's adapter contract
(tests/cases/adapters/) and identity vectors (tests/cases/identity/)."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ADAPTER_CASES = REPO / "tests" / "cases" / "adapters"
IDENTITY_CASES = REPO / "tests" / "cases" / "identity"


def require(flag: str) -> bool:
    """Whether CI (or the developer's env.sh) requires a part: a test that
    needs it then fails where it would skip."""
    return os.environ.get(flag) == "1"


@pytest.fixture
def table_bytes() -> bytes:
    return (ADAPTER_CASES / "policy.table.json").read_bytes()
