"""Preflight refuses a model directory whose config.json sglang could not load (issue #45,
class 10): not JSON, a JSON list, a directory, a dangling link, a symlink loop, empty, not
UTF-8, a FIFO, nested 100000 deep. Real files, the real probe (in this interpreter, under a
real Python 3.8 where this machine has one, and over the real SSH fleet); nothing simulated
but the GPU (the fleet's nvidia-smi stub)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120kit.preflight.host import model_check
from sm120kit.preflight.launch import parse_launch
from sm120kit.remote import script_bundle
from sm120kit.remote.preflight_probe import json_depth, model_state, read_config
from tests.conftest import invoke_env, json_of, run_invoke
from tests.rules.test_remote_python38 import _python38
from tests.support.fleet import Fleet

DEEP = "[" * 100000 + "]" * 100000


def _text(body: str | bytes) -> Callable[[Path], None]:
    def make(config: Path) -> None:
        if isinstance(body, bytes):
            config.write_bytes(body)
        else:
            config.write_text(body, encoding="utf-8")

    return make


def _dir(config: Path) -> None:
    config.mkdir()


def _dangling(config: Path) -> None:
    config.symlink_to(config.parent / "gone.json")


def _loop(config: Path) -> None:
    other = config.parent / "other.json"
    config.symlink_to(other)
    other.symlink_to(config)


def _fifo(config: Path) -> None:
    os.mkfifo(config)


#: (how config.json is made, what the refusal says about it)
BAD = [
    pytest.param(_text("{not json"), "is not JSON: ", id="not-json"),
    pytest.param(_text('["LlamaForCausalLM"]'), "is a JSON list, not an object", id="list"),
    pytest.param(_text('"llama"'), "is a JSON str, not an object", id="string"),
    pytest.param(_text("null"), "is a JSON NoneType, not an object", id="null"),
    pytest.param(_dir, "is a directory, not a file", id="directory"),
    pytest.param(_dangling, "cannot be read: No such file or directory", id="dangling-link"),
    pytest.param(_loop, "cannot be read: Too many levels of symbolic links", id="symlink-loop"),
    pytest.param(_text(""), "is empty", id="empty"),
    pytest.param(_text(" \n"), "is empty", id="blank"),
    pytest.param(_text(b'{"model_type": "\xff"}'), "is not UTF-8 text (byte 16)", id="not-utf8"),
    pytest.param(_fifo, "is not a regular file", id="fifo"),
    pytest.param(_text(DEEP), "nests arrays/objects deeper than 64 levels", id="deep-lists"),
    pytest.param(
        _text('{"a":' * 100000 + "1" + "}" * 100000),
        "nests arrays/objects deeper than 64 levels",
        id="deep-objects",
    ),
]


def bad_model(tmp_path: Path, make: Callable[[Path], None]) -> Path:
    """A model directory with weights and a config.json made by `make`."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "model.safetensors").write_bytes(b"\0" * 4096)
    make(path / "config.json")
    return path


@pytest.mark.parametrize(("make", "says"), BAD)
def test_bad_config_is_a_failed_model_check(
    tmp_path: Path, make: Callable[[Path], None], says: str
) -> None:
    """Each unusable config.json is one failed model_path check naming the file, what is wrong
    and the fix; the probe's answer stays JSON (no exception, no RecursionError)."""
    path = bad_model(tmp_path, make)
    model = model_state(str(path))
    json.loads(json.dumps(model))
    verdict = model_check(parse_launch(["--model-path", str(path)]), {"model": model})
    assert verdict["status"] == "fail", verdict
    assert verdict["reason"] == f"{path}/config.json {model['config_error']}"
    assert says in verdict["reason"]
    assert f"replace {path}/config.json" in verdict["fix"]


def test_a_good_config_still_passes(tmp_path: Path) -> None:
    """A real-shaped config (nested text_config, strings holding brackets) passes and is read."""
    doc = {
        "architectures": ["X"],
        "text_config": {"model_type": "llama", "rope": {"a": [[1, 2], "]]}}[["]}},
        "chat_template": '{% if x %}[{"a": "\\"]"}]{% endif %}',
    }
    path = bad_model(tmp_path, _text(json.dumps(doc)))
    model = model_state(str(path))
    assert model["form"] == "hf" and model["config"]["model_type"] == "llama"
    verdict = model_check(parse_launch(["--model-path", str(path)]), {"model": model})
    assert verdict["status"] == "pass", verdict


@pytest.mark.parametrize(
    ("text", "depth"),
    [("{}", 1), ("[[]]", 2), ('["[[[", {"]": 1}]', 2), ('"\\\\"', 0), ('["\\"[["]', 1)],
)
def test_json_depth_skips_brackets_in_strings(text: str, depth: int) -> None:
    """The pre-scan counts brackets outside strings only (escaped quotes included)."""
    assert json_depth(text, 64) == depth


@pytest.mark.parametrize("python", [sys.executable, _python38()], ids=["this", "py38"])
def test_probe_script_answers_for_a_deep_config(tmp_path: Path, python: str | None) -> None:
    """The shipped probe bundle, run as a host runs it (on 3.8 too), answers with the refusal
    for a 100000-deep config.json instead of dying with RecursionError."""
    if python is None:
        pytest.skip("no Python 3.8 on this machine (python3.8 on PATH or under ~/.pyenv)")
    path = bad_model(tmp_path, _text(DEEP))
    args = json.dumps({"model_path": str(path), "python": str(tmp_path / "no-python")})
    proc = subprocess.run(
        [python, "-", args], input=script_bundle("preflight_probe"), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    model = json.loads(proc.stdout.strip().splitlines()[-1])["model"]
    assert model["form"] == "bad_config"
    assert "deeper than 64 levels" in model["config_error"]


def test_read_config_never_raises_on_the_hub_path(tmp_path: Path) -> None:
    """read_config on a path that does not exist at all: a reason, not an exception."""
    assert read_config(str(tmp_path / "nope.json")) == (
        None,
        "cannot be read: No such file or directory",
    )


def test_invoke_preflight_refuses_a_bad_config_over_ssh(fleet: Fleet, tmp_path: Path) -> None:
    """`invoke preflight` on fleet host gpu1 (real sshd) with a model dir whose config.json is
    a JSON list and one nested 100000 deep: a failed run (exit 2), the failed check in the JSON and one line
    of the human output, no traceback."""
    for name, body in (("list", '["LlamaForCausalLM"]'), ("deep", DEEP)):
        (tmp_path / name).mkdir()
        path = bad_model(tmp_path / name, _text(body))
        argv = ["preflight", "-H", "gpu1", "--json", "--", "python", "-m",
                "sglang.launch_server", "--model-path", str(path)]  # fmt: skip
        proc = run_invoke(argv, invoke_env(fleet, tmp_path), timeout=300)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        checks = json_of(proc)["hosts"]["gpu1"]["preflight"]["checks"]
        model = next(c for c in checks if c["check"] == "model_path")
        assert model["status"] == "fail" and model["reason"].startswith(f"{path}/config.json ")
    human = run_invoke(argv[:3] + argv[4:], invoke_env(fleet, tmp_path), timeout=300)
    assert human.returncode == 2 and "Traceback" not in human.stdout + human.stderr
    assert f"{path}/config.json nests arrays/objects deeper than 64" in human.stdout + human.stderr
