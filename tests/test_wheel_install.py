"""The serving env's installer (sm120kit/remote/lib/wheel_install.py): one pip per CPU at
once, then bytecode per CPU, on real wheels into a real venv.

Real parts: `python -m venv`, pip, compileall, wheels written by tests/support/tiny_index.py.
Nothing is simulated.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.remote.lib import wheel_install
from tests.support.tiny_index import make_wheel, sha256_of

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("wi") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    return env


def test_split_balances_bytes_and_keeps_no_empty_group() -> None:
    groups = wheel_install.split([9, 1, 5, 4, 1], 2, lambda n: n)
    assert sorted(sum(g) for g in groups) == [10, 10]
    assert wheel_install.split([3], 8, lambda n: n) == [[3]]


def test_wheels_that_write_one_file_share_a_bundle_in_lock_order(tmp_path: Path) -> None:
    """Two wheels that both write ``ns/__init__.py`` go through one pip, the later last, as
    one pip over the whole lock would install them; a third is on its own."""
    shared = {"ns/__init__.py": b"# namespace\n"}
    a = make_wheel(tmp_path, "ns-a", "1.0", extra=shared)
    b = make_wheel(tmp_path, "ns-b", "1.0", extra=shared)
    c = make_wheel(tmp_path, "solo", "1.0")
    files = [(str(p), sha256_of(p)) for p in (a, b, c)]
    paths = [wheel_install.installed_paths(f) for f, _ in files]
    assert ("lib", "ns/__init__.py", len(shared["ns/__init__.py"])) in paths[0]
    assert wheel_install.bundles(files, paths) == [[0, 1], [2]]


def test_install_puts_every_file_in_place_with_bytecode(venv: Path, tmp_path: Path) -> None:
    wheels = [
        make_wheel(tmp_path, f"demo-{i}", "1.0", extra={f"demo_{i}/mod.py": b"X = 1\n"})
        for i in range(5)
    ]
    bad_py = make_wheel(tmp_path, "broken", "1.0", extra={"broken/py2.py": b"print 'x'\n"})
    files = [(str(p), sha256_of(p)) for p in [*wheels, bad_py]]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    error, timings = wheel_install.install(str(venv), files, str(scratch), 240)
    assert error is None, error
    assert timings["processes"] >= 1 and timings["python_files"] == 12
    site = Path(wheel_install.site_packages(str(venv)))
    for i in range(5):
        assert (site / f"demo_{i}-1.0.dist-info" / "RECORD").is_file()
        [pyc] = (site / f"demo_{i}" / "__pycache__").glob("mod.cpython-*.pyc")
        assert pyc.stat().st_size > 0
    # A file that does not compile is left without bytecode, as pip leaves it.
    assert not list((site / "broken" / "__pycache__").glob("py2.*.pyc"))
    shown = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "show", "demo-3"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "Version: 1.0" in shown.stdout


def test_a_file_pip_refuses_fails_with_pips_last_line(venv: Path, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "refused", "1.0")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    error, _ = wheel_install.install(str(venv), [(str(wheel), "0" * 64)], str(scratch), 240)
    assert error is not None and error.startswith("pip install --no-deps: ")
    assert "DO NOT MATCH THE HASHES" in error and error.endswith(sha256_of(wheel))
