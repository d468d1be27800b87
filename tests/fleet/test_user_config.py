"""User and system invoke config apply over the project's invoke.yaml (issue #45 class 8).

Real config files under a temporary HOME and the real `invoke` CLI (subprocess); nothing is
simulated. The project's invoke.yaml holds defaults (sm120kit/settings.py `config_layers`):
~/.invoke.yaml overrides it and `-f FILE` overrides that.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from sm120kit.cli import config_files
from tests.conftest import REPO, invoke_env, run_invoke


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = invoke_env(None, tmp, **extra)
    env["HOME"] = str(tmp / "home")
    env.pop("INVOKE_SM120KIT_INVENTORY", None)
    (tmp / "home").mkdir(exist_ok=True)
    return env


def _user(tmp: Path, text: str) -> Path:
    path = tmp / "home" / ".invoke.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _inv(tmp: Path, host: str) -> Path:
    path = tmp / f"{host}.yaml"
    path.write_text(f"all:\n  hosts:\n    {host}:\n      ansible_connection: local\n")
    return path


def test_user_inventory_overrides_the_project_default(tmp_path: Path) -> None:
    _user(tmp_path, f"sm120kit:\n  inventory: {_inv(tmp_path, 'userhost')}\n")
    proc = run_invoke(["facts", "-H", "userhost"], _env(tmp_path))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("sm120kit:\n  forks: 0\n", "forks"),
        ("sm120kit:\n  lock_stale_after: nope\n", "lock_stale_after"),
    ],
)
def test_a_bad_user_value_is_one_line_naming_the_file(tmp_path: Path, text: str, word: str) -> None:
    path = _user(tmp_path, text)
    proc = run_invoke(["facts", "-H", "local"], _env(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert str(path) in proc.stderr and word in proc.stderr


def test_a_runtime_file_beats_the_user_file(tmp_path: Path) -> None:
    _user(tmp_path, f"sm120kit:\n  inventory: {_inv(tmp_path, 'userhost')}\n")
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(f"sm120kit:\n  inventory: {_inv(tmp_path, 'runtimehost')}\n")
    proc = run_invoke(["-f", str(runtime), "facts", "-H", "runtimehost"], _env(tmp_path))
    assert proc.returncode == 0, proc.stderr


#: Config file defects: (file name, bytes, words the one line must hold). Each is read by invoke
#: itself (yaml.safe_load / json.load) and was a traceback.
BROKEN = [
    (".invoke.yaml", b"sm120kit:\n  forks: [\n", ["line 3", "not valid YAML"]),
    (".invoke.yaml", b"a: 1\n b: 2\n", ["line 2", "not valid YAML"]),
    (
        ".invoke.yaml",
        b'sm120kit: !!python/object/apply:os.system ["touch PWNED"]\n',
        ["line 1", "!!python/object/apply:os.system", "not allowed"],
    ),
    (".invoke.yaml", b"x: !custom 1\n", ["line 1", "!custom"]),
    (".invoke.yaml", b"- sm120kit\n- forks\n", ["a mapping", "got a list"]),
    (".invoke.yaml", b"just words\n", ["a mapping", "got a string"]),
    (".invoke.yaml", b"\xff\xfeforks: 1\n", ["not UTF-8"]),
    (".invoke.yml", b"a: *nowhere\n", ["line 1", "undefined alias"]),
    (".invoke.json", b'{"sm120kit": \n', ["line 2", "not valid JSON"]),
    (".invoke.json", b"[1, 2]", ["got a list"]),
    (".invoke.py", b"forks = (\n", ["line 1", "SyntaxError"]),
]


def _one_line(proc: Any, *words: str) -> None:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def _sm120kit(args: list[str], env: dict[str, str]) -> Any:
    """The project's command: `python -m sm120kit.cli` (the `sm120kit` console script's code)."""
    return subprocess.run(
        [sys.executable, "-m", "sm120kit.cli", "--search-root", str(REPO), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=REPO,
    )


@pytest.mark.parametrize(("name", "data", "words"), BROKEN[:-1])
def test_each_defect_is_one_message_naming_the_file(
    tmp_path: Path, name: str, data: bytes, words: list[str]
) -> None:
    """The loaders invoke's Config gets (sm120kit/cli/config_files.py), on real files."""
    path = tmp_path / name
    path.write_bytes(data)
    load = config_files.load_json if name.endswith(".json") else config_files.load_yaml
    with pytest.raises(config_files.ConfigFileError) as err:
        load(None, str(path))
    message = str(err.value)
    assert message.startswith(str(path)) and "\n" not in message
    for word in words:
        assert word in message, (word, message)


@pytest.mark.parametrize(("name", "data", "words"), [BROKEN[2], BROKEN[-1]])
def test_a_broken_user_file_is_one_line_through_the_project_command(
    tmp_path: Path, name: str, data: bytes, words: list[str]
) -> None:
    """~/.invoke.* is read by invoke before tasks.py: the project's command checks it."""
    env = _env(tmp_path)
    path = tmp_path / "home" / name
    path.write_bytes(data)
    _one_line(_sm120kit(["inventory", "-H", "local"], env), str(path), *words)
    assert not (REPO / "PWNED").exists() and not (tmp_path / "home" / "PWNED").exists()


@pytest.mark.parametrize(("how", "case"), [("-f", BROKEN[0]), ("INVOKE_RUNTIME_CONFIG", BROKEN[4])])
def test_a_broken_runtime_file_is_one_line_under_bare_invoke(
    tmp_path: Path, how: str, case: tuple[str, bytes, list[str]]
) -> None:
    """The runtime file is read after tasks.py is loaded, so the plain `invoke` command gets
    the check too."""
    name, data, words = case
    path = tmp_path / ("runtime" + Path(name).suffix)
    path.write_bytes(data)
    env = _env(tmp_path)
    args = ["inventory", "-H", "local"]
    if how == "-f":
        args = ["-f", str(path), *args]
    else:
        env["INVOKE_RUNTIME_CONFIG"] = str(path)
    _one_line(run_invoke(args, env), str(path), *words)


def test_a_missing_runtime_file_and_a_directory_are_one_line(tmp_path: Path) -> None:
    env = _env(tmp_path)
    missing = tmp_path / "nosuch.yaml"
    _one_line(
        run_invoke(["-f", str(missing), "inventory", "-H", "local"], env), str(missing), "no such"
    )
    (tmp_path / "home" / ".invoke.yaml").mkdir()
    proc = _sm120kit(["--json", "inventory", "-H", "local"], env)
    _one_line(proc, "Is a directory")
    assert json.loads(proc.stdout)["hosts"] == {}


def test_a_broken_system_file_is_one_line(tmp_path: Path) -> None:
    """/etc/invoke.yaml is the same loader at invoke's system prefix; a temporary prefix stands
    in for /etc (other processes on this machine read the real one)."""
    (tmp_path / "invoke.yaml").write_text("sm120kit: {forks: 1\n")
    code = (
        "from sm120kit.cli import errors; errors.install(); import invoke, sys\n"
        f"try:\n invoke.Config(system_prefix={str(tmp_path) + '/'!r})\n"
        "except invoke.Exit as e:\n sys.exit(e.code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    _one_line(proc, str(tmp_path / "invoke.yaml"), "line 2", "not valid YAML")


def test_the_console_script_names_the_entry_point() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    module, _, attr = project["scripts"]["sm120kit"].partition(":")
    assert callable(getattr(importlib.import_module(module), attr))
