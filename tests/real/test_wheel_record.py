"""docs/flash-attn.md's record of the built flash-attn wheel is generated (#46 item 6c): the
block between its wheel-record markers is sm120kit/builds/wheel_record.py's rendering of the
saved record (log/2026-12-01-flash-attn-full-wheel.json), and the same code reads a real
wheel's fatbins (shared objects compiled by nvcc here, tests/fixtures/smoke) with the tool's
own reader. The 66 MB flash-attn wheel itself is not on the test machines (a 2 h 37 min
build); its saved record is what the reader gave for it.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from typing import Any

from sm120kit.builds.wheel_record import (
    BEGIN,
    END,
    WheelRecord,
    doc_block,
    main,
    read_record,
    render,
    with_block,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "flash-attn.md"
SAVED = REPO / "log" / "2026-12-01-flash-attn-full-wheel.json"


def test_the_doc_block_is_the_rendering_of_the_saved_record() -> None:
    rec = WheelRecord.from_json(SAVED.read_text(encoding="utf-8"))
    assert doc_block(DOC.read_text(encoding="utf-8")) == render(rec)
    assert rec.filename == "flash_attn-2.8.3.post2-cp311-cp311-linux_x86_64.whl"
    (so,) = rec.modules
    assert (so.sass, so.ptx) == (("sm_120",), ())
    assert WheelRecord.from_json(rec.to_json()) == rec


def test_a_real_wheel_is_read_and_the_doc_rewritten(smoke_fixtures: Any, tmp_path: Path) -> None:
    """A wheel holding nvcc-built objects (sm_120 SASS; compute_120 PTX only): the record's
    sha256 is the file's, the targets are the fatbin's; --doc rewrites only the block."""
    wheel = tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(smoke_fixtures.libs["good"], "demo/_sass.so")
        zf.write(smoke_fixtures.libs["ptx"], "demo/_ptx.so")
        zf.writestr("demo/__init__.py", "")
    rec = read_record(wheel)
    assert rec.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert rec.size == wheel.stat().st_size
    by_path = {m.path: m for m in rec.modules}
    assert set(by_path) == {"demo/_sass.so", "demo/_ptx.so"}
    assert (by_path["demo/_sass.so"].sass, by_path["demo/_sass.so"].ptx) == (("sm_120",), ())
    assert by_path["demo/_ptx.so"].sass == () and by_path["demo/_ptx.so"].ptx
    assert by_path["demo/_sass.so"].size == Path(smoke_fixtures.libs["good"]).stat().st_size
    doc = tmp_path / "doc.md"
    doc.write_text(f"# T\n\nbefore\n\n{BEGIN}\nold\n{END}\n\nafter\n", encoding="utf-8")
    saved = tmp_path / "rec.json"
    assert main([str(wheel), "--json", str(saved), "--doc", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert doc_block(text) == render(WheelRecord.from_json(saved.read_text(encoding="utf-8")))
    assert text.startswith("# T\n\nbefore\n\n") and text.endswith(f"{END}\n\nafter\n")
    assert "SASS `sm_120`; PTX none" in text
    assert with_block(text, render(rec)) == text  # a second run changes nothing


def test_bad_input_is_one_line(tmp_path: Path, capsys: Any) -> None:
    assert main([str(tmp_path / "missing.whl")]) == 1
    assert main(["--from", str(SAVED), "--doc", str(tmp_path / "none.md")]) == 1
    (tmp_path / "plain.md").write_text("no markers\n", encoding="utf-8")
    assert main(["--from", str(SAVED), "--doc", str(tmp_path / "plain.md")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("wheel_record: ") for line in err)
    assert "no <!-- wheel-record:begin -->" in err[-1]
