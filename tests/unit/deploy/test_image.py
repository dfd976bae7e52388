"""deploy/docker/Dockerfile and .dockerignore: the context holds what the build copies and nothing
else, and the image that runs is the last stage, labelled and unprivileged."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[3]
DOCKERFILE = (ROOT / "deploy" / "docker" / "Dockerfile").read_text()
IGNORE = [
    line.strip()
    for line in (ROOT / ".dockerignore").read_text().splitlines()
    if line.strip() and not line.lstrip().startswith("#")
]


def stages() -> list[str]:
    """The Dockerfile's stages, each from its FROM line to the next."""
    return [part for part in re.split(r"^(?=FROM )", DOCKERFILE, flags=re.M) if part.startswith("FROM ")]


def let_in(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` (a top-level name) in the build context: the last
    pattern that matches decides, as Docker and podman read the file."""
    kept = True
    for pattern in IGNORE:
        negated = pattern.startswith("!")
        bare = pattern.removeprefix("!")
        if bare == "*" or bare == path or path.startswith(bare.rstrip("/") + "/"):
            kept = negated
    return kept


def test_the_context_is_only_what_the_build_copies() -> None:
    copied = {
        source
        for line in re.findall(r"^COPY (?!--from)(.+)$", DOCKERFILE, flags=re.M)
        for source in line.split()[:-1]
    }
    assert copied, "the Dockerfile copies nothing from the context"
    assert [source for source in sorted(copied) if not let_in(source)] == []
    # What made a working checkout's context about 900 MB.
    for heavy in (".venv", ".venv-stats", ".cache", ".devstack", ".git", "node_modules", "docs", "tests"):
        assert not let_in(heavy), heavy


def test_the_rule_above_sees_a_file_left_out() -> None:
    assert not let_in("bench")
    assert let_in("libs/slotflow/pyproject.toml")


def test_the_image_is_the_last_stage_and_carries_nothing_of_the_build() -> None:
    build, run = stages()[0], stages()[-1]
    assert len(stages()) >= 2
    assert " AS build" in build.splitlines()[0]
    assert "pip install" not in run  # the run stage installs nothing: the environments are copied
    assert re.search(r"^COPY --from=build /opt/slotflow /opt/slotflow$", run, flags=re.M)
    assert re.search(r"^USER \d+:\d+$", run, flags=re.M)
    for label in ("title", "version", "revision", "licenses", "description"):
        assert f"org.opencontainers.image.{label}=" in run, label
