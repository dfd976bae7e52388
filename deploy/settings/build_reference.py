"""Writes docs/settings.md, the reference of every environment variable slotflow reads, from the
settings classes themselves: their fields, types, defaults and bounds, and each field's `#:`
comment (or its `Field(description=...)`) as the description. `--check` fails when the committed
page differs from what the classes say, so a setting cannot be added, renamed or re-defaulted
without its reference following (`make lint` runs it; tests/unit/deploy/test_settings_reference.py).

    python deploy/settings/build_reference.py           # rewrite docs/settings.md
    python deploy/settings/build_reference.py --check   # exit 1 when it is out of date
"""

import argparse
import ast
import importlib
import inspect
import sys
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "settings.md"


@dataclass(frozen=True)
class Section:
    title: str
    #: "module:Class" of the settings class; the variables are its env_prefix + each field's name.
    target: str
    #: Where the behaviour behind these settings is described.
    see: str


SECTIONS = (
    Section("Kafka: where it is, the topics", "slotflow.settings:KafkaSettings", "docs/design.md"),
    Section("Kafka: TLS and SASL", "slotflow_base.kafka.security:KafkaSecurity", "docs/security.md"),
    Section("PostgreSQL", "slotflow_base.settings:PostgresSettings", "docs/security.md"),
    Section("Signed commands", "slotflow.principals.settings:SignatureSettings", "docs/security.md"),
    Section("Ticker", "slotflow_ticker.config:TickerSettings", "docs/ticker.md"),
    Section("Claimer", "slotflow_claimer.config:ClaimerSettings", "docs/claimer.md"),
    Section("Orchestrator", "slotflow_orchestrator.config:OrchestratorSettings", "docs/orchestrator.md"),
    Section("DLQ service", "slotflow_dlq.config:DlqSettings", "docs/dlq.md"),
    Section("API and dashboard", "slotflow_api.config:ApiSettings", "docs/api.md"),
    Section("Stats worker", "slotflow_stats.config:StatsSettings", "docs/stats.md"),
)

HEADER = """# Settings reference

Every environment variable a slotflow service reads, generated from the settings classes by
`deploy/settings/build_reference.py` (do not edit by hand: `make lint` fails when this page and the
classes disagree). Each service's page explains what its settings do; this page is the complete
list. A variable left unset takes the default; a value outside its bounds stops the service at start
with a message naming the variable. Secrets are never logged (docs/security.md).
"""


def load(target: str) -> type[BaseSettings]:
    module, _, name = target.partition(":")
    found = getattr(importlib.import_module(module), name)
    if not (isinstance(found, type) and issubclass(found, BaseSettings)):
        raise TypeError(f"{target} is not a settings class")
    return found


def field_comments(cls: type) -> dict[str, str]:
    """Each field's `#:` comment lines, from the classes that define it (the nearest wins)."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, BaseModel, BaseSettings) or not issubclass(klass, BaseModel):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        node = ast.parse(source).body[0]
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                above: list[str] = []
                index = statement.lineno - 2
                while index >= 0 and lines[index].strip().startswith("#:"):
                    above.insert(0, lines[index].strip()[2:].strip())
                    index -= 1
                if above:
                    comments[statement.target.id] = " ".join(above)
    return comments


def type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{value}`" for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(type_name(a) for a in kept)
    if origin is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin in (list, tuple, set, frozenset):
        return "comma-separated list"
    if annotation is SecretStr:
        return "secret"
    if annotation is Path:
        return "path"
    if isinstance(annotation, type):
        names = {"str": "text", "int": "integer", "float": "number", "bool": "true/false"}
        if annotation.__name__ in ("AnyHttpUrl", "HttpUrl", "AnyUrl"):
            return "URL"
        return names.get(annotation.__name__, annotation.__name__)
    return str(annotation).replace("typing.", "")


def default_text(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "computed"
    value = info.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "`" + ",".join(str(v) for v in value) + "`" if value else "empty"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value)
    return f"`{text}`" if text else "empty"


def bounds(info: FieldInfo) -> str:
    words = []
    for item in info.metadata:
        for attribute, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            limit = getattr(item, attribute, None)
            if limit is not None and isinstance(item, annotated_types.BaseMetadata):
                words.append(f"{sign} {limit:,}" if isinstance(limit, int) else f"{sign} {limit}")
        pattern = getattr(item, "pattern", None)
        if pattern:
            words.append(f"matches `{pattern}`")
    return ", ".join(words)


def describe(section: Section) -> tuple[list[str], list[str]]:
    """The section's table lines, and the fields that have no description."""
    cls = load(section.target)
    prefix = str(cls.model_config.get("env_prefix", ""))
    comments = field_comments(cls)
    rows = [
        f"## {section.title}",
        "",
        f"`{section.target.replace(':', '.')}`; what these do: {section.see}.",
        "",
        "| variable | type | default | bounds | what it does |",
        "| --- | --- | --- | --- | --- |",
    ]
    undocumented = []
    for name, info in cls.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseSettings):
            continue  # read from the environment on its own: a section of its own
        variable = (info.alias or f"{prefix}{name}").upper()
        text = info.description or comments.get(name, "")
        if not text:
            undocumented.append(f"{section.target}.{name}")
        cells = [f"`{variable}`", type_name(annotation), default_text(info), bounds(info), text]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return [*rows, ""], undocumented


def render() -> tuple[str, list[str]]:
    lines = [HEADER]
    undocumented: list[str] = []
    for section in SECTIONS:
        rows, missing = describe(section)
        lines.extend(rows)
        undocumented.extend(missing)
    return "\n".join(lines).rstrip("\n") + "\n", undocumented


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail when docs/settings.md is out of date")
    args = parser.parse_args(argv)
    page, undocumented = render()
    if undocumented:
        print("settings without a description (add a #: comment above the field):", file=sys.stderr)
        for name in undocumented:
            print(f"  {name}", file=sys.stderr)
        return 1
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != page:
            print(
                f"{PAGE.relative_to(ROOT)} is out of date: run python deploy/settings/build_reference.py",
                file=sys.stderr,
            )
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
