"""The frozen identity vectors (tests/cases/identity/vectors.json) give the
same identities through the binding, byte for byte (docs/spec/identity.md)."""

import json

import pytest

from conftest import IDENTITY_CASES
from mcpolicy import Engine, Error, ManualClock, Policy, Store, request_identity

VECTORS = json.loads((IDENTITY_CASES / "vectors.json").read_text())["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["name"])
def test_vector_from_a_dict(vector: dict) -> None:
    assert request_identity(vector["server"], vector["params"], vector["fields"]) == vector["identity"]


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["name"])
def test_vector_from_json_text(vector: dict) -> None:
    text = json.dumps(vector["params"], ensure_ascii=False).encode()
    assert request_identity(vector["server"], text, vector["fields"]) == vector["identity"]


def test_the_vectors_are_not_empty() -> None:
    assert len(VECTORS) >= 20


def test_engine_identity_is_the_refusal_key_under_the_tables_fields(table_bytes: bytes) -> None:
    policy = Policy.from_json(table_bytes)
    engine = Engine(policy, Store.memory(), ManualClock(1_700_000_000_000))
    minimal = next(v for v in VECTORS if v["name"] == "minimal")
    assert policy.identity_fields == minimal["fields"]
    assert engine.identity(minimal["server"], minimal["params"]) == minimal["identity"]


def test_params_that_are_not_an_object_are_an_error() -> None:
    with pytest.raises(Error) as caught:
        request_identity("srv", b"[1, 2]", ["messages"])
    assert caught.value.code == "binding.not_an_object"
