"""docs/settings.md is what the settings classes say: every variable, default and bound, and a
description for each (deploy/settings/build_reference.py writes it; `make lint` runs its --check)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _builder() -> ModuleType:
    path = ROOT / "deploy" / "settings" / "build_reference.py"
    spec = importlib.util.spec_from_file_location("build_reference", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_what_the_classes_say() -> None:
    page, undocumented = _builder().render()
    assert not undocumented, f"settings without a description: {undocumented}"
    assert (ROOT / "docs" / "settings.md").read_text(encoding="utf-8") == page, (
        "docs/settings.md is out of date: run python deploy/settings/build_reference.py"
    )


def test_a_field_without_a_comment_is_reported() -> None:
    builder = _builder()
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class Undocumented(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="SLOTFLOW_EXAMPLE_")

        #: Documented.
        documented: int = 1
        bare: int = 2

    sys.modules[__name__].Undocumented = Undocumented  # type: ignore[attr-defined]
    section = builder.Section("Example", f"{__name__}:Undocumented", "docs/settings.md")
    rows, undocumented = builder.describe(section)
    assert undocumented == [f"{__name__}:Undocumented.bare"]
    assert any("`SLOTFLOW_EXAMPLE_DOCUMENTED`" in row and "Documented." in row for row in rows)
