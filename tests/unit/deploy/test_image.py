"""deploy/docker: what the image is built from is pinned and stays so.

- Every third-party dependency a package's pyproject names (extras the image installs included) is
  in the lock of the environment that package goes into, pinned (`==`) with its files' hashes, at
  the version the tests run with (requirements-dev.txt, services/stats/requirements.txt): a lock
  that drifted from them would ship what no test ran.
- The Dockerfile installs those locks with --require-hashes and wheels only, in a build stage, and
  its final stage carries the OCI labels.
- The build context is an allow-list (.dockerignore) that lets in every path the Dockerfile copies
  and none of a checkout's heavy folders.
- The Python base's Debian lock names the Python version its interpreter package has.

The build itself (and the image's size) is checked by `make check-compose` (docs/deploy.md).
"""

import fnmatch
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
DOCKER = ROOT / "deploy" / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
CORE = (
    "libs/slotflow-base",
    "libs/slotflow",
    *(f"services/{s}" for s in ("api", "claimer", "dlq", "orchestrator", "ticker")),
)
STATS = ("libs/slotflow-base", "services/stats")
#: Extras of our packages the image installs (the Dockerfile's `slotflow-lib[tracing]`).
EXTRAS = {"libs/slotflow": ("tracing",)}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    found = re.match(r"[A-Za-z0-9._-]+", line.strip())
    assert found, line
    return normalized(found.group(0))


def third_party(projects: tuple[str, ...]) -> set[str]:
    """The dependencies of ``projects`` that are not slotflow's own distributions."""
    names: set[str] = set()
    for project in projects:
        with (ROOT / project / "pyproject.toml").open("rb") as file:
            meta = tomllib.load(file)["project"]
        wanted = list(meta.get("dependencies", []))
        for extra in EXTRAS.get(project, ()):
            wanted += meta["optional-dependencies"][extra]
        names |= {requirement_name(r) for r in wanted}
    return {n for n in names if not n.startswith("slotflow-")}


def lock(name: str) -> dict[str, tuple[str, int]]:
    """A pip-compile lock: each package's pinned version and how many hashes it carries."""
    pinned: dict[str, tuple[str, int]] = {}
    current = ""
    for line in (DOCKER / name).read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line):
            current = normalized(match.group(1))
            pinned[current] = (match.group(2), 0)
        elif "--hash=sha256:" in line:
            version, hashes = pinned[current]
            pinned[current] = (version, hashes + 1)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise AssertionError(f"{name}: a line that is neither a pin nor a hash: {line!r}")
    return pinned


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9._-]+)(\[[^]]*\])?==(\S+)", line):
            found[normalized(match.group(1))] = match.group(3)
    return found


def lock_problems(lock_name: str, projects: tuple[str, ...], tested: dict[str, str]) -> list[str]:
    locked = lock(lock_name)
    problems = [f"{lock_name}: {n} is not locked" for n in sorted(third_party(projects) - set(locked))]
    problems += [f"{lock_name}: {n}=={v} has no hash" for n, (v, hashes) in locked.items() if hashes == 0]
    problems += [
        f"{lock_name}: {n}=={v}, the tests run {tested[n]}"
        for n, (v, _) in locked.items()
        if n in tested and tested[n] != v
    ]
    return problems


def test_the_core_lock_holds_every_dependency_at_the_tested_version() -> None:
    assert lock_problems("requirements.lock", CORE, pins(ROOT / "requirements-dev.txt")) == []


def test_the_stats_lock_holds_every_dependency_at_the_stats_pins() -> None:
    assert (
        lock_problems("requirements-stats.lock", STATS, pins(ROOT / "services/stats/requirements.txt")) == []
    )


def test_the_build_lock_holds_the_setuptools_the_packages_build_with() -> None:
    (setuptools,) = [v for n, (v, _) in lock("requirements-build.lock").items() if n == "setuptools"]
    for project in {*CORE, *STATS}:
        with (ROOT / project / "pyproject.toml").open("rb") as file:
            (required,) = tomllib.load(file)["build-system"]["requires"]
        floor = re.fullmatch(r"setuptools>=(\d+)", required)
        assert floor, f"{project}: build requires {required}"
        assert int(setuptools.split(".")[0]) >= int(floor.group(1)), project


def test_the_lock_check_finds_a_missing_package_and_a_drifted_pin() -> None:
    tested = pins(ROOT / "requirements-dev.txt") | {"fastapi": "0.0.1"}
    problems = lock_problems("requirements-stats.lock", CORE, tested)
    assert "requirements-stats.lock: fastapi is not locked" in problems
    drifted = lock_problems("requirements.lock", CORE, tested)
    assert drifted == [
        f"requirements.lock: fastapi=={lock('requirements.lock')['fastapi'][0]}, the tests run 0.0.1"
    ]


def stages(dockerfile: str) -> list[str]:
    """The Dockerfile's stages, each its text from its FROM (continuation lines joined)."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    lines = [line for line in joined.splitlines() if not line.lstrip().startswith("#")]
    text = "\n".join(lines)
    return [f"FROM{part}" for part in re.split(r"^FROM", text, flags=re.M)[1:]]


def test_the_dockerfile_installs_the_locks_by_hash_in_a_build_stage() -> None:
    build, final = stages(DOCKERFILE.read_text())
    assert build.startswith("FROM ${PYTHON_IMAGE} AS build")
    for name in ("requirements.lock", "requirements-stats.lock", "requirements-build.lock"):
        (install,) = [
            c for c in re.findall(r"pip[^&]*install[^&]*", build) if f"-r deploy/docker/{name}" in c
        ]
        assert "--require-hashes" in install, install
        assert "--only-binary=:all:" in install, install
    # Nothing installs in the final stage: it copies the finished environments.
    assert "pip" not in final
    assert "COPY --from=build /opt/slotflow /opt/slotflow" in final
    assert "COPY --from=build /opt/slotflow-stats /opt/slotflow-stats" in final


def test_the_final_stage_carries_the_oci_labels() -> None:
    _, final = stages(DOCKERFILE.read_text())
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', final))
    assert labels["org.opencontainers.image.version"] == "${SLOTFLOW_VERSION}"
    assert labels["org.opencontainers.image.revision"] == "${SLOTFLOW_REVISION}"
    assert labels["org.opencontainers.image.source"] == "${SLOTFLOW_SOURCE}"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"


def in_context(path: str, rules: list[str]) -> bool:
    """Whether ``path`` (relative, /-separated) is in the build context under .dockerignore
    ``rules`` (Docker's semantics: the last matching rule wins, `!` lets in, a rule matching a
    folder matches what is under it)."""
    included = True
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for rule in rules:
        negated = rule.startswith("!")
        pattern = rule.removeprefix("!")
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatchcase(p, pattern[3:]) for p in parts)
        else:
            hit = any(fnmatch.fnmatchcase(p, pattern) for p in prefixes)
        if hit:
            included = negated
    return included


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def copied_sources() -> list[str]:
    """Every path the Dockerfile copies from the context (not from a stage)."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    sources = []
    for line in joined.splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            sources += line.split()[1:-1]
    return sources


def test_the_build_context_holds_what_the_dockerfile_copies_and_no_heavy_folder() -> None:
    rules = dockerignore()
    sources = copied_sources()
    assert "libs" in sources
    assert "deploy/docker/requirements.lock" in sources
    assert [s for s in sources if not in_context(s, rules)] == []
    assert in_context("libs/slotflow/src/slotflow/service.py", rules)
    heavy = [
        ".devstack/kafka/data/x",
        ".venv/bin/python",
        ".venv-stats/bin/python",
        ".cache/x",
        ".git/HEAD",
        "docs/design.md",
        "tests/conftest.py",
        "libs/slotflow/src/slotflow/__pycache__/x.pyc",
        "services/api/src/slotflow_api.egg-info/PKG-INFO",
        "deploy/devstack/up.sh",
    ]
    assert [p for p in heavy if in_context(p, rules)] == []


@pytest.mark.parametrize("path", [".venv/bin/python", ".devstack/pg/base/1", ".git/config"])
def test_without_the_allow_list_the_heavy_folders_would_be_sent(path: str) -> None:
    assert in_context(path, [r for r in dockerignore() if r != "*"])


def test_the_python_base_lock_names_its_python() -> None:
    text = (ROOT / "deploy" / "containers" / "python-base.lock").read_text()
    (python,) = re.findall(r"^# python (3\.11\.\d+)$", text, re.M)
    packages = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert {"python3", "python3-venv", "ca-certificates"} <= set(packages)
    assert packages["python3.11-minimal"].startswith(f"{python}-")
