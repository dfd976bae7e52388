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
