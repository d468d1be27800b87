"""The recorded resolution (tests/unit/test_preflight_recorded.py) against a real sglang 0.5.23
serving env: its own sglang resolves every recorded launch and answers what was recorded.
Set SM120KIT_SERVING_ENV to the real sglang 0.5.23 env's python to run it (CI has none:
it skips).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sm120kit.preflight.rules import RESOLVED_FIELDS
from sm120kit.remote.preflight_probe import model_state, resolve
from tests.unit.test_preflight_recorded import MODELS, RECORDED, _argv


@pytest.mark.skipif(
    not os.environ.get("SM120KIT_SERVING_ENV"),
    reason="needs a real sglang 0.5.23 serving env with torch: set SM120KIT_SERVING_ENV to "
    "its python (run by hand; CI has none)",
)
def test_real_serving_env_resolves_like_the_recording() -> None:
    """Real: the env's own sglang resolves every recorded launch (one interpreter, on this
    machine's GPU or the faked one) and answers what was recorded."""
    cases = RECORDED["cases"]
    request = {
        "cases": [_argv(c["argv"]) for c in cases],
        "fields": list(RESOLVED_FIELDS),
        "cc": [12, 0],
        "memory_mib": 32768,
    }
    model = model_state(str(MODELS / "llama-mha"))
    env_python = os.environ["SM120KIT_SERVING_ENV"]
    # The venv's own site-packages (its python is a link to the base interpreter: not resolved).
    lib = Path(env_python).parent.parent / "lib"
    found = sorted(lib.glob("python3*/site-packages"))
    site = str(found[0]) if found else None
    doc = resolve(env_python, request, model, {"timeout": 900}, site)
    assert doc["ran"], doc
    for want, got in zip(cases, doc["cases"], strict=True):
        assert (got["error"] is None) == (want["error"] is None), (want["argv"], got)
        assert got["backends"] == want["backends"], want["argv"]
