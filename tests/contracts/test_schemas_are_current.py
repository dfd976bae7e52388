"""Committed wire artefacts must match the models: drift fails here, `make contracts` fixes it."""

import json
from pathlib import Path

import jsonschema
import pytest

from slotflow.contracts import REGISTRY, Message
from slotflow.contracts.codec import decode
from slotflow.contracts.export import rendered_files, schema_file_name

CONTRACTS = Path(__file__).parents[2] / "contracts"


@pytest.mark.parametrize("relative", sorted(rendered_files()))
def test_committed_file_matches_the_models(relative: str) -> None:
    committed = CONTRACTS / relative
    assert committed.exists(), f"contracts/{relative} is missing; run `make contracts`"
    assert committed.read_text() == rendered_files()[relative], (
        f"contracts/{relative} differs from the models; run `make contracts` and review the diff"
    )


def test_no_stale_schema_files() -> None:
    expected = {Path(p).name for p in rendered_files() if p.startswith("schemas/")}
    present = {p.name for p in (CONTRACTS / "schemas").glob("*.json")}
    assert present == expected


@pytest.mark.parametrize("model", list(REGISTRY), ids=lambda m: schema_file_name(m))
def test_every_type_has_an_example_that_validates(model: type[Message]) -> None:
    path = CONTRACTS / "examples" / schema_file_name(model)
    assert path.exists(), f"no example for {model.message_type}; run `make contracts`"
    envelope = decode(path.read_bytes())
    assert (envelope.type, envelope.version) == (model.message_type, model.message_version)
    assert isinstance(REGISTRY.parse(envelope), model)
    # The exported JSON Schema accepts the example too (what a non-Python consumer would check).
    schema = json.loads((CONTRACTS / "schemas" / schema_file_name(model)).read_text())
    jsonschema.validate(envelope.data, schema)
    jsonschema.validate(
        json.loads(path.read_text()), json.loads((CONTRACTS / "schemas/envelope.json").read_text())
    )
