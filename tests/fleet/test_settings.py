"""Every setting, whatever its source, goes through one typed parser (sm120kit/settings.py).

Walks every setting the tool declares with a bad value of each kind, from the environment
(INVOKE_SM120KIT_*) and from a config file (`invoke -f`), through the real `invoke` command:
one line naming the setting and its source, exit 1, one JSON document, no traceback, no run
started. Booleans take only true/false/yes/no/1/0: a "false" from the environment once
accepted unknown SSH host keys (checked against the real sshd fleet).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import Sm120Error
from sm120kit.settings import SETTINGS, Setting, parse, resolve
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet

#: Bad values per kind: (from the environment, from a config file).
BAD: dict[str, tuple[list[str], list[Any]]] = {
    "bool": (["maybe", "2", "off", "truee", ""], ["maybe", 2, 0.5, [True]]),
    "int": (["abc", "1.5", "-1", "inf", "nan", "1e999"], ["abc", 1.5, -1, True, [1]]),
    "float": (
        ["abc", "nan", "inf", "-inf", "-1", ""],
        ["abc", float("nan"), float("inf"), -1, True],
    ),
    "path": (["a\nb"], [5, True, ["x"], {"a": 1}]),
    "controller": (["a\nb"], [5, ["x"], {"a": 1}]),
    "stores": (["[1]", "{a", "x"], ["x", 5, [1]]),
}


def _bad_cases() -> list[tuple[Setting, str, Any]]:
    cases = []
    for setting in SETTINGS:
        env_values, file_values = BAD[setting.kind]
        cases += [(setting, "env", v) for v in env_values]
        cases += [(setting, "file", v) for v in file_values]
    return cases


def _nest(setting: Setting, value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    node = doc
    for key in setting.path[:-1]:
        node = node.setdefault(key, {})
    node[setting.path[-1]] = value
    return doc


def test_every_kind_has_bad_values() -> None:
    assert {s.kind for s in SETTINGS} <= set(BAD)
    # The settings invoke.yaml documents are exactly the declared ones.
    import yaml

    from tests.conftest import REPO

    section = yaml.safe_load((REPO / "invoke.yaml").read_text())["sm120kit"]
    documented = {k for k, v in section.items() if k != "cache"} | {
        f"cache.{k}" for k in section["cache"]
    }
    assert documented == {s.name for s in SETTINGS}


@pytest.mark.parametrize(
    ("setting", "source", "value"),
    _bad_cases(),
    ids=lambda v: v.name if isinstance(v, Setting) else repr(v)[:20],
)
def test_bad_value_is_refused_naming_setting_and_source(
    setting: Setting, source: str, value: Any
) -> None:
    if source == "env":
        layers: list[tuple[str, Any]] = []
        env = {setting.env: value}
        where = f"{setting.env}={value!r}"
    else:
        layers = [("/etc/somewhere/invoke.yaml", _nest(setting, value))]
        env = {}
        where = "/etc/somewhere/invoke.yaml"
    with pytest.raises(Sm120Error) as caught:
        resolve(layers, env)
    message = str(caught.value)
    assert message.startswith(f"setting {setting.name} ({where}): "), message
    assert "\n" not in message


@pytest.mark.parametrize("word", ["true", "TRUE", "Yes", "1", " yes ", "True"])
def test_true_words(word: str) -> None:
    for setting in (s for s in SETTINGS if s.kind == "bool"):
        assert parse(setting, word, "test") is True


@pytest.mark.parametrize("word", ["false", "FALSE", "No", "0", "False", " no"])
def test_false_words(word: str) -> None:
    for setting in (s for s in SETTINGS if s.kind == "bool"):
        assert parse(setting, word, "test") is False


def test_good_values_from_env_and_files() -> None:
    env = {
        "INVOKE_SM120KIT_CONNECT_TIMEOUT": "1.5",
        "INVOKE_SM120KIT_FORKS": " 4 ",
        "INVOKE_SM120KIT_ACCEPT_NEW_HOST_KEYS": "no",
        "INVOKE_SM120KIT_CACHE_HOST_STORE": "False",
        "INVOKE_SM120KIT_CACHE_CONTROLLER": "false",
        "INVOKE_SM120KIT_CACHE_STORES": '[{"name": "t", "type": "local", "path": "/x"}]',
        "INVOKE_SM120KIT_KNOWN_HOSTS": "",
    }
    layers = [
        ("user", {"forks": 8, "accept_new_host_keys": True, "cache": {"wait_timeout": 60}}),
        ("project", {"retry_backoff": 0, "cache": {"poll_interval": 0.25}}),
    ]
    got = resolve(layers, env)
    assert got["connect_timeout"] == 1.5 and got["forks"] == 4
    assert got["accept_new_host_keys"] is False and got["retry_backoff"] == 0.0
    assert got["known_hosts"] is None
    assert got["cache"]["host_store"] is False and got["cache"]["controller"] is False
    assert got["cache"]["wait_timeout"] == 60.0 and got["cache"]["poll_interval"] == 0.25
    assert got["cache"]["stores"] == [{"name": "t", "type": "local", "path": "/x"}]
    assert got["cache"]["stale_lock_after"] == 300.0  # the default


def _walk_cli_cases() -> list[tuple[Setting, str, Any]]:
    """One bad value per setting and source: each through the real command."""
    cases = []
    for setting in SETTINGS:
        env_values, file_values = BAD[setting.kind]
        cases += [(setting, "env", env_values[0]), (setting, "file", file_values[0])]
    return cases


@pytest.mark.parametrize(
    ("setting", "source", "value"),
    _walk_cli_cases(),
    ids=lambda v: v.name if isinstance(v, Setting) else repr(v)[:20],
)
def test_cli_bad_setting_is_one_line_exit_1(
    tmp_path: Path, setting: Setting, source: str, value: Any
) -> None:
    env = invoke_env(None, tmp_path)
    for name in list(env):  # only the value under test
        if name.startswith("INVOKE_SM120KIT_") and name != "INVOKE_SM120KIT_RUN_ROOT":
            del env[name]
    args = ["facts", "-H", "local", "--json"]
    if setting.name == "run_root":
        env.pop("INVOKE_SM120KIT_RUN_ROOT")
    if source == "env":
        env[setting.env] = value
        where = f"({setting.env}={value!r})"
    else:
        conf = tmp_path / "conf.yaml"
        conf.write_text(json.dumps({"sm120kit": _nest(setting, value)}))
        args = ["-f", str(conf), *args]
        where = f"({conf})"
    proc = run_invoke(args, env, timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    doc = json_of(proc)
    assert doc["hosts"] == {}
    assert doc["error"].startswith(f"setting {setting.name} {where}: "), doc["error"]
    assert "Traceback" not in proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [f"error: {doc['error']}"]
    assert not (tmp_path / "runs").exists()  # no run started: no host was touched


@pytest.mark.parametrize("word", ["false", "no", "False", "0"])
def test_accept_new_host_keys_false_from_env_refuses_unknown_keys(
    fleet: Fleet, tmp_path: Path, word: str
) -> None:
    known = tmp_path / "known_hosts"
    env = invoke_env(
        fleet,
        tmp_path,
        INVOKE_SM120KIT_KNOWN_HOSTS=str(known),
        INVOKE_SM120KIT_ACCEPT_NEW_HOST_KEYS=word,
    )
    proc = run_invoke(["facts", "-H", "gpu6", "--json"], env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    entry = json_of(proc)["hosts"]["gpu6"]
    assert entry["status"] == "unreachable" and "not in" in entry["error"]
    assert not known.exists() or "ssh-ed25519" not in known.read_text()


def test_accept_new_host_keys_yes_from_env_accepts(fleet: Fleet, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    env = invoke_env(
        fleet,
        tmp_path,
        INVOKE_SM120KIT_KNOWN_HOSTS=str(known),
        INVOKE_SM120KIT_ACCEPT_NEW_HOST_KEYS="Yes",
    )
    proc = run_invoke(["facts", "-H", "gpu6", "--json"], env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ssh-ed25519" in known.read_text()


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--timeout", "nan"), ("--timeout", "inf"), ("--forks", "1.5"), ("--pid", "-1")],
)
def test_number_flags_are_finite(tmp_path: Path, flag: str, value: str) -> None:
    proc = run_invoke(
        ["serve-check", "-H", "local", flag, value, "--json"], invoke_env(None, tmp_path)
    )
    assert proc.returncode == 1, proc.stderr
    assert json_of(proc)["error"].startswith(f"{flag}: ")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("name", "value", "ok"),
    [("ssh_max_sessions", "1", True), ("ssh_max_sessions", "0", False),
     ("ssh_max_sessions", "3", True), ("ssh_silence_timeout", "0.5", True),
     ("ssh_silence_timeout", "0", False), ("ssh_silence_timeout", "-5", False)],
)  # fmt: skip
def test_ssh_session_settings_take_one_session_and_a_positive_silence(
    name: str, value: str, ok: bool
) -> None:
    """sshd's MaxSessions 1 is a host the runner serves (runner/sessions.py), so
    ssh_max_sessions takes 1; the keepalive's silence bound must be above 0."""
    env = {f"INVOKE_SM120KIT_{name.upper()}": value}
    if ok:
        assert float(resolve([], env)[name]) == float(value)
    else:
        with pytest.raises(Sm120Error, match=f"^setting {name} "):
            resolve([], env)
