"""Real wheels of a tiny pure-Python project (tinypkg 0.1 and 0.2), built with pip: the
entries of the wheel-cache tests' stores."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def make_tiny_wheels(root: Path) -> dict[str, Path]:
    """Real wheels of two tiny projects (tinypkg 0.1 and 0.2), built with pip under `root`
    (the `tiny_wheels` session fixture)."""
    out: dict[str, Path] = {}
    for version in ("0.1", "0.2"):
        src = root / f"src-{version}"
        (src / "tinypkg").mkdir(parents=True)
        (src / "tinypkg" / "__init__.py").write_text(f"VALUE = 'v{version}'\n")
        (src / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
            f'[project]\nname = "tinypkg"\nversion = "{version}"\n'
        )
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "-q",
                "-w",
                str(root / "dist"),
                str(src),
            ],
            check=True,
        )
        [out[version]] = (root / "dist").glob(f"tinypkg-{version}-*.whl")
    return out
