"""The docs speak of the project itself: no reference to the project's issue tracker, whose numbers
mean nothing to a reader of a release (an upstream project's issue, named with its project, is a
citation and stays)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: "issue 23", "issues 20 and 23", "issue #606", unless an upstream project names it ("faust issue #606").
TRACKER_REFERENCE = re.compile(r"(?<!faust )\bissues? #?\d+", re.IGNORECASE)


def _documents() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for tree in ("libs", "services", "examples", "deploy"):
        found.extend(sorted((ROOT / tree).rglob("*.md")))
    return found


def test_no_document_cites_the_tracker() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _documents()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if TRACKER_REFERENCE.search(line)
    ]
    assert not cited, "tracker numbers in the docs:\n" + "\n".join(cited)


def test_the_rule_tells_a_citation_from_a_tracker_number() -> None:
    assert TRACKER_REFERENCE.search("flow on (issue 23).")
    assert TRACKER_REFERENCE.search("see issues 20 and 23")
    assert not TRACKER_REFERENCE.search("an offset past a message in flight (faust issue #606)")


#: The user's reference: how to use slotflow and what it guarantees. Which test proves what, and the
#: bugs the tests were written for, belong to the engineering record (docs/reliability/,
#: docs/benchmarks/, docs/decisions/, docs/development.md, docs/devstack.md).
USER_REFERENCE = [
    "api", "cli", "client", "claimer", "dashboard", "deploy", "design", "dlq", "operations",
    "orchestrator", "scheduling", "security", "settings", "stats", "ticker", "tracing", "workflows",
    "workflows-history",
]  # fmt: skip
TEST_FILE_CITATION = re.compile(r"\btests/[\w/]+\.py")


def test_the_users_reference_cites_no_test_files() -> None:
    cited = [
        f"docs/{name}.md:{number}: {line.strip()}"
        for name in USER_REFERENCE
        for number, line in enumerate(
            (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8").splitlines(), 1
        )
        if TEST_FILE_CITATION.search(line)
    ]
    assert not cited, (
        "test files cited in the user's reference (move them to docs/reliability/):\n" + "\n".join(cited)
    )


def test_every_component_record_is_linked_from_the_reliability_index() -> None:
    index = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    records = sorted((ROOT / "docs" / "reliability").glob("*.md"))
    assert records
    unlinked = [p.name for p in records if f"(reliability/{p.name})" not in index]
    assert not unlinked, unlinked


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = [
        f"{path.relative_to(ROOT)}: {target}"
        for path in _documents()
        for target in LINK.findall(path.read_text(encoding="utf-8"))
        if not target.startswith(("http://", "https://", "mailto:")) and not (path.parent / target).exists()
    ]
    assert not broken, "links to nothing:\n" + "\n".join(broken)
