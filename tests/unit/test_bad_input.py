"""Bad input is exit 1 everywhere: one line, one JSON document under --json, no traceback.

The whole table goes through the real `invoke` command. Hosts here are `ansible_connection:
local` ones (nothing is run on them: every case must fail before any host is touched, so no
run directory is made).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import invoke_env, json_of, run_invoke

HOST = """all:
  hosts:
    h1:
      ansible_connection: local
      work_root: {work}
      target_driver: "580.95.05"
      target_arch: "12.0"
{extra}
"""

#: (inventory vars of h1 or None, task args (INV: the inventory), extra env, says)
CASES: list[tuple[str | None, list[str], dict[str, str], str]] = [
    ("pip_args: 'unterminated \"quote'", ["plan", "-H", "h1"], {}, "pip_args"),
    ("pip_args: 'a \"b'", ["provision", "-H", "h1"], {}, "does not split like shell words"),
    ("recipe.torch.version: [1]", ["plan", "-H", "h1"], {}, "recipe.torch.version: expected"),
    ("recipe.torch.verison: 2.9.1", ["provision", "-H", "h1"], {}, "is not a recipe value"),
    ("recipe.drivers: '>=1'", ["install-cuda", "-H", "h1"], {}, "cannot be overridden"),
    (
        "recipe.packages.minikernel.knobs: 3",
        ["build", "-H", "h1", "--package", "minikernel"],
        {},
        "recipe.packages.minikernel.knobs",
    ),
    ("recipe.cuda.version: 99", ["smoke", "-H", "h1"], {}, "recipe.cuda.version"),
    (
        "recipe.torch.index: 5",
        ["cache.key", "-H", "h1", "--package", "minikernel"],
        {},
        "recipe.torch.index",
    ),
    (None, ["serve-check", "-H", "local", "--process-match", "("], {}, "--process-match '('"),
    (None, ["serve-check", "-H", "local", "--url", "http://[::1"], {}, "--url"),
    (None, ["serve-check", "-H", "local", "--timeout", "nan"], {}, "--timeout"),
    (None, ["facts", "-H", "local", "--forks", "abc"], {}, "--forks"),
    (None, ["build", "-H", "local", "--package", "nope"], {}, "--package 'nope'"),
    (None, ["cache.export", "/proc/x"], {}, "cache.export /proc/x"),
    (None, ["cache.export", "{file}/x"], {}, "Not a directory"),
    (None, ["cache.import", "/proc/x"], {}, "no index.json"),
    (None, ["cache.import", "{badindex}"], {}, "cache key 'zz'"),
    (None, ["cache.prune", "--max-size", "abc"], {}, "--max-size"),
    (None, ["sources.fetch", "--package", "sgl-kernel", "--mirror", "{tmp}/none"], {}, "--mirror"),
    (None, ["inventory", "-i", "/proc/x"], {}, "does not exist"),
    (
        None,
        ["facts", "-H", "local"],
        {"INVOKE_SM120KIT_ACCEPT_NEW_HOST_KEYS": "nah"},
        "setting accept_new_host_keys",
    ),
    (
        None,
        ["facts", "-H", "local"],
        {"INVOKE_SM120KIT_CONNECT_TIMEOUT": "abc"},
        "setting connect_timeout",
    ),
    (
        None,
        ["cache.list"],
        {"INVOKE_SM120KIT_CACHE_POLL_INTERVAL": "inf"},
        "setting cache.poll_interval",
    ),
    (None, ["sources.list"], {"INVOKE_SM120KIT_SOURCES_STORE": "a\nb"}, "setting sources_store"),
]


@pytest.mark.parametrize(("extra", "args", "env", "says"), CASES, ids=lambda v: str(v)[:40])
def test_bad_input_is_one_line_exit_1_no_traceback(
    tmp_path: Path, extra: str | None, args: list[str], env: dict[str, str], says: str
) -> None:
    (tmp_path / "a-file").write_text("")
    bad_index = tmp_path / "export"
    bad_index.mkdir()
    (bad_index / "index.json").write_text(json.dumps({"entries": [{"key": "zz"}]}))
    args = [a.format(file=tmp_path / "a-file", badindex=bad_index, tmp=tmp_path) for a in args]
    if extra is not None:
        inv = tmp_path / "hosts.yaml"
        inv.write_text(HOST.format(work=tmp_path / "work", extra="      " + extra))
        args = [*args, "-i", str(inv)]
    proc = run_invoke([*args, "--json"], invoke_env(None, tmp_path, **env), timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    doc = json_of(proc)
    assert says in doc["error"], doc["error"]
    assert doc["hosts"] == {} and "\n" not in doc["error"]
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [f"error: {doc['error']}"]
    assert not list((tmp_path / "runs").glob("*/")), "a run started"
    assert not (tmp_path / "work").exists()  # nothing was made on the host
