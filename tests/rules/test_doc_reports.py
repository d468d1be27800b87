"""Dated by-hand run reports live in log/, not in the reference docs: a paragraph of docs/ that
says a run was done "by hand" and dates it is a run report (docs/benchmarks.md, which holds
the figures that stand, is the exception). Every log/ file a doc names exists."""

from __future__ import annotations

import re

from tests.conftest import REPO

DOCS = REPO / "docs"
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
BY_HAND = re.compile(r"\bby[ -]hand\b", re.IGNORECASE)


def dated_reports(text: str) -> list[str]:
    """The paragraphs of `text` that date a by-hand run (a pointer at a dated log/ file is
    not one)."""
    paragraphs = re.split(r"\n\s*\n", text)
    return [
        p for p in paragraphs if BY_HAND.search(p) and DATE.search(re.sub(r"log/[\w.-]+", "", p))
    ]


def test_finder_sees_a_report() -> None:
    assert dated_reports("intro\n\n## Built by hand (2026-12-01)\n\nmore") == [
        "## Built by hand (2026-12-01)"
    ]
    assert dated_reports("Removed by hand.\n\nOn 2026-12-01 a release.") == []
    assert dated_reports("Run by hand: `log/2026-12-01-x.md`.") == []


def test_no_dated_run_report_in_the_reference_docs() -> None:
    found = {
        doc.name: [p[:80] for p in dated_reports(doc.read_text(encoding="utf-8"))]
        for doc in sorted(DOCS.glob("*.md"))
        if doc.name != "benchmarks.md"
    }
    found = {k: v for k, v in found.items() if v}
    assert not found, f"dated by-hand run reports belong in log/: {found}"


def test_named_logs_exist() -> None:
    named = {
        m for doc in DOCS.glob("*.md") for m in re.findall(r"`(log/[^`]+\.md)`", doc.read_text())
    }
    assert named, "the docs point at their run reports in log/"
    missing = sorted(n for n in named if not (REPO / n).exists())
    assert not missing, f"docs name run reports that do not exist: {missing}"
