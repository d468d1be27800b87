"""The rule a remembered smoke verdict is reused by (`smoke.report.reuse`), in a table: any
verdict that did not fail is reused as judged (a warn as much as an ok: the real vLLM env's
stack smoke is "warn", vllm's ``_vllm_fa2_C`` holding only compute_80 PTX for 12.0), a failed
check fails again at once (the ``--recheck`` path), and none remembered or ``--recheck`` runs
the checks. The verdicts are the forms `smoke_stack` and `failed_doc` store (pure data: the
memo's remote side and a real provision are exercised by tests/fleet/test_check_memo.py and
tests/real/test_stack.py)."""

from __future__ import annotations

from typing import Any

import pytest

from sm120kit.smoke.report import reuse

WARN = {  # the real vLLM host's memo (state/smoke/<key>.json), as `smoke_stack` returned it
    "arch": "12.0",
    "checked": "vllm 0.33.0, tilelang 0.1.12, humming-kernels 0.1.19, import vllm, 5 JIT "
    "toolchain(s)",
    "checked_at": "2026-12-07T11:40:49Z",
    "gpu": False,
    "run_dir": "/work/runs/20261207-113709-provision-fc4258",
    "summary": "1 pass, 2 skip, 2 warn, stack warn; checked vllm 0.33.0, ...",
}
OK = {**WARN, "summary": "3 pass; checked sglang 0.5.23, import sglang"}
SKIP = {**WARN, "summary": "checked nothing: none of the packages is installed"}
FAILED = {
    "failed": "smoke failed: import sglang fails: ImportError: broken",
    "summary": "1 fail",
    "checked_at": "2026-12-07T11:00:00Z",
    "run_dir": None,
}
PACKAGES_WARN = {"summary": "1 warn", "packages": {"flash-attn": {"status": "warn"}}}


@pytest.mark.parametrize(
    ("memo", "recheck", "want"),
    [
        (None, False, "run"),
        ({}, False, "run"),
        (OK, False, "pass"),
        (WARN, False, "pass"),
        (SKIP, False, "pass"),
        (PACKAGES_WARN, False, "pass"),
        (FAILED, False, "fail"),
        ({**WARN, "failed": ""}, False, "pass"),
        (OK, True, "run"),
        (WARN, True, "run"),
        (FAILED, True, "run"),
        (None, True, "run"),
    ],
)
def test_a_remembered_verdict_is_reused_unless_it_failed(
    memo: dict[str, Any] | None, recheck: bool, want: str
) -> None:
    assert reuse(memo, recheck=recheck) == want
