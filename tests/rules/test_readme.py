"""The README stays a short entry point, and every docs/ page it links to exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: What a new user needs fits in about 12 KB; the full reference lives in docs/.
MAX_BYTES = 12_800

LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_readme_is_short() -> None:
    assert len(README.read_bytes()) <= MAX_BYTES


def test_readme_docs_links_exist() -> None:
    targets = [m.group(1) for m in LINK.finditer(README.read_text())]
    docs = [t for t in targets if t.startswith("docs/")]
    assert "docs/reference.md" in docs and "docs/architecture.md" in docs
    missing = [t for t in docs if not (ROOT / t).is_file()]
    assert missing == []


def test_docs_relative_links_exist() -> None:
    """Links between docs pages (and back to the README) point at files that exist."""
    missing = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for m in LINK.finditer(page.read_text()):
            target = m.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                missing.append(f"{page.name}: {target}")
    assert missing == []
