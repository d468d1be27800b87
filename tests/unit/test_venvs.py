"""tests/support/venvs.make_venv run from inside a venv: the env it makes sees that venv's
packages, as the suite's envs must see its torch when it runs as ``PYTHON=<venv>/bin/python
bash scripts/test.sh``. Real venvs; the package is a one-line stand-in for torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_an_env_made_from_a_venv_sees_the_venvs_packages(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(outer)], check=True)
    site = subprocess.run(
        [str(outer / "bin" / "python"), "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "only_in_outer").mkdir()
    (Path(site) / "only_in_outer" / "__init__.py").write_text("WHERE = 'outer'\n")
    inner = tmp_path / "inner"
    make = "from pathlib import Path; from tests.support.venvs import make_venv; "
    make += f"print(make_venv(Path({str(inner)!r})))"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    made = subprocess.run(
        [str(outer / "bin" / "python"), "-c", make], capture_output=True, text=True, env=env
    )
    assert made.returncode == 0, made.stderr
    seen = subprocess.run(
        [made.stdout.strip(), "-c", "import only_in_outer; print(only_in_outer.WHERE)"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert seen.stdout.strip() == "outer", seen.stderr
