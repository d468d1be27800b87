"""The public corpus (tests/unit/test_preflight_corpus.py) resolved in a real sglang 0.5.23
serving env: every launch as recorded, the env's distribution listing the one recorded.
Set SM120KIT_SERVING_ENV to the real sglang 0.5.23 env's python to run it (CI has none:
it skips).
"""

from __future__ import annotations

import os

import pytest

from tests.support.public_corpus import record, score
from tests.unit.test_preflight_corpus import RECORDING, REPORTS


@pytest.mark.skipif(
    not os.environ.get("SM120KIT_SERVING_ENV"),
    reason="needs a real sglang 0.5.23 serving env with torch: set SM120KIT_SERVING_ENV to "
    "its python (run by hand; CI has none)",
)
def test_real_serving_env_resolves_the_corpus_like_the_recording() -> None:
    """Real: the preflight probe in the env resolves every corpus launch as recorded, and the
    env's distribution listing is the one recorded."""
    fresh = record(os.environ["SM120KIT_SERVING_ENV"], REPORTS)
    assert fresh["ran"], fresh
    for want, got in zip(RECORDING["cases"], fresh["cases"], strict=True):
        assert got["id"] == want["id"]
        assert (got["error"] is None) == (want["error"] is None), (want["id"], got)
        assert got["backends"] == want["backends"], want["id"]
    assert fresh["env"]["installed"] == RECORDING["env"]["installed"]
    # Issue 44 class 6: the locked tilelang is in the env's own listing, and torch's CUDA is
    # read from its torch/version.py (PyPI's torch 2.14.1 has no +cu130 tag).
    assert fresh["env"]["installed"]["tilelang"] == "0.1.12"
    assert fresh["env"]["dists"]["torch"]["cuda"] == "13.0"
    scored = score(REPORTS, fresh)
    print(f"\nreal env: {sum(s.right for s in scored)}/{len(scored)} right")
