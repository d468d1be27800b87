"""The record of a built wheel that a doc keeps: its file name, size and sha256, and per shared
object the device code the tool's own reader finds in its fatbin (the catalogue's reader,
`sm120kit.stack.catalogue_read.read_module`: SASS and PTX targets, the nvcc that built it).

Generated, not typed: ``python3 -m sm120kit.builds.wheel_record WHEEL --json RECORD.json``
writes the record, ``--doc DOC.md`` rewrites the block between the doc's
``<!-- wheel-record:begin -->`` and ``<!-- wheel-record:end -->`` lines from it (``--from
RECORD.json`` renders a saved record when the wheel is not at hand). A package's doc keeps the
record of the wheel it built by hand; tests/real/test_wheel_record.py pins that its block is this
module's rendering of the saved record, and reads a real nvcc-built wheel with the same code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..stack.catalogue_read import read_module

BEGIN = "<!-- wheel-record:begin -->"
END = "<!-- wheel-record:end -->"


@dataclass(frozen=True)
class ModuleRecord:
    """One shared object of the wheel: its path in it, size, and device code as read."""

    path: str
    size: int
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    nvcc: str | None = None
    error: str = ""


@dataclass(frozen=True)
class WheelRecord:
    """A built wheel as a doc records it (`source`: what the record was made from)."""

    filename: str
    size: int
    sha256: str
    modules: tuple[ModuleRecord, ...] = ()
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        """The record as the JSON file a doc's block is rendered from."""
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> WheelRecord:
        """A record written by `to_json`."""
        doc = json.loads(text)
        mods = tuple(
            ModuleRecord(
                path=m["path"],
                size=int(m["size"]),
                sass=tuple(m.get("sass") or ()),
                ptx=tuple(m.get("ptx") or ()),
                nvcc=m.get("nvcc"),
                error=m.get("error") or "",
            )
            for m in doc.get("modules") or []
        )
        return cls(
            filename=doc["filename"],
            size=int(doc["size"]),
            sha256=doc["sha256"],
            modules=mods,
            source=doc.get("source") or "",
            notes=tuple(doc.get("notes") or ()),
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_record(wheel: Path) -> WheelRecord:
    """Read `wheel`: its bytes' sha256, and each ``.so`` in it through the catalogue's reader."""
    mods: list[ModuleRecord] = []
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory(prefix="wheel-record-") as tmp:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            name = info.filename
            if not (name.endswith(".so") or ".so." in name):
                continue
            copy = os.path.join(tmp, "module.so")
            with zf.open(info) as src, open(copy, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            facts = read_module(name, copy, "", "", ())
            os.unlink(copy)
            mods.append(
                ModuleRecord(name, info.file_size, facts.sass, facts.ptx, facts.nvcc, facts.error)
            )
    return WheelRecord(
        wheel.name,
        wheel.stat().st_size,
        _sha256(wheel),
        tuple(mods),
        source=f"read from {wheel.name} by sm120kit.builds.wheel_record",
    )


def _targets(values: tuple[str, ...]) -> str:
    return ", ".join(f"`{v}`" for v in values) or "none"


def render(rec: WheelRecord) -> str:
    """The doc block: a table of the wheel and each of its shared objects."""
    lines = [
        "| file | bytes | device code (the tool's fatbin reader) |",
        "| --- | --- | --- |",
        f"| `{rec.filename}` (sha256 `{rec.sha256}`) | {rec.size:,} | |",
    ]
    for m in rec.modules:
        if m.error:
            code = f"unreadable: {m.error}"
        else:
            code = f"SASS {_targets(m.sass)}; PTX {_targets(m.ptx)}"
            if m.nvcc:
                code += f"; nvcc {m.nvcc}"
        lines.append(f"| `{m.path}` | {m.size:,} | {code} |")
    if rec.source:
        lines.append("")
        lines.append(f"Record: {rec.source}.")
    lines.extend(["", *rec.notes] if rec.notes else [])
    return "\n".join(lines)


def doc_block(text: str) -> str | None:
    """The block between the markers of a doc's text, or None without markers."""
    m = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    return m.group(1).rstrip("\n") if m else None


def with_block(text: str, block: str) -> str:
    """`text` with its marked block replaced by `block` (a ValueError without the markers)."""
    if doc_block(text) is None:
        raise ValueError(f"no {BEGIN} ... {END} block")
    pattern = re.escape(BEGIN) + r"\n.*?" + re.escape(END)
    return re.sub(pattern, lambda _m: f"{BEGIN}\n{block}\n{END}", text, count=1, flags=re.S)


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); one error line and exit 1 on bad input."""
    ap = argparse.ArgumentParser(prog="python3 -m sm120kit.builds.wheel_record")
    ap.add_argument("wheel", nargs="?", help="the built wheel to read")
    ap.add_argument("--from", dest="saved", help="render this saved record instead")
    ap.add_argument("--json", dest="json_out", help="write the record here")
    ap.add_argument("--doc", help="rewrite this doc's wheel-record block")
    args = ap.parse_args(argv)
    try:
        if args.saved:
            rec = WheelRecord.from_json(Path(args.saved).read_text(encoding="utf-8"))
        elif args.wheel:
            rec = read_record(Path(args.wheel))
        else:
            raise ValueError("give a wheel, or --from RECORD.json")
        if args.json_out:
            Path(args.json_out).write_text(rec.to_json(), encoding="utf-8")
        if args.doc:
            doc = Path(args.doc)
            doc.write_text(with_block(doc.read_text(encoding="utf-8"), render(rec)), "utf-8")
        if not (args.json_out or args.doc):
            print(render(rec))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        print(f"wheel_record: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
