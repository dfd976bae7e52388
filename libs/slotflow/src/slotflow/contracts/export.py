"""Write the wire artefacts in `contracts/`: JSON Schemas, the topic table, example messages.

Run with `python -m slotflow.contracts.export contracts/` (`make contracts`). Schemas and the topic
table are regenerated; examples are written only when missing, so committed ones stay golden.
"""

import json
import sys
from pathlib import Path

from slotflow.contracts import REGISTRY, Envelope, Message
from slotflow.contracts.examples import example_envelope
from slotflow.contracts.topics import TOPICS


def schema_file_name(model: type[Message]) -> str:
    return f"{model.message_type}.v{model.message_version}.json"


def render_schema(model: type[Message]) -> str:
    schema = model.model_json_schema(mode="validation")
    schema["$id"] = f"slotflow/{schema_file_name(model)}"
    schema["x-slotflow-type"] = model.message_type
    schema["x-slotflow-version"] = model.message_version
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def render_envelope_schema() -> str:
    schema = Envelope.model_json_schema(mode="validation")
    schema["$id"] = "slotflow/envelope.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def render_topics_json() -> str:
    return json.dumps([t.model_dump(mode="json") for t in TOPICS], indent=2) + "\n"


def render_topics_markdown() -> str:
    lines = [
        "# Topics",
        "",
        "Generated from `slotflow.contracts.topics` by `make contracts`; do not edit by hand.",
        "",
        "| name | key | partitions | retention | cleanup | producers | consumers | purpose |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in TOPICS:
        retention = "forever" if t.retention_ms < 0 else f"{t.retention_ms // 86_400_000} d"
        lines.append(
            f"| `{t.name}` | {t.key} | {t.partitions} | {retention} | {t.cleanup_policy} | "
            f"{', '.join(t.producers)} | {', '.join(t.consumers)} | {t.purpose} |"
        )
    return "\n".join(lines) + "\n"


def rendered_files() -> dict[str, str]:
    """Every generated file, by path relative to `contracts/`."""
    files = {f"schemas/{schema_file_name(m)}": render_schema(m) for m in REGISTRY}
    files["schemas/envelope.json"] = render_envelope_schema()
    files["topics.json"] = render_topics_json()
    files["topics.md"] = render_topics_markdown()
    return files


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m slotflow.contracts.export CONTRACTS_DIR", file=sys.stderr)  # noqa: T201
        return 2
    root = Path(argv[0])
    schemas = root / "schemas"
    schemas.mkdir(parents=True, exist_ok=True)
    expected = rendered_files()
    for stale in schemas.glob("*.json"):
        if f"schemas/{stale.name}" not in expected:
            stale.unlink()
    for relative, text in expected.items():
        (root / relative).write_text(text)
    examples = root / "examples"
    examples.mkdir(exist_ok=True)
    for model in REGISTRY:
        path = examples / schema_file_name(model)
        if not path.exists():
            path.write_text(example_envelope(model).model_dump_json(indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
