"""What a person reads while and after a run: the live row's transfer words (files, bytes,
rate, ETA), plan's summary of a lock's fetches, and plain output without per-second lines.
Pure: numbers and Steps in, text out; the plain lines through a real rich Console into a
string."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from sm120kit.output.progress import PlainProgress, duration, transfer_words
from sm120kit.runner.results import HostResult, RunResult, StepResult
from sm120kit.steps import SUMMARY_RUN, Step, commands, summary

GB = 10**9


@pytest.mark.parametrize(
    ("done", "total", "got", "size", "seconds", "want"),
    [
        (0, 207, 0, int(4.36 * GB), 0.0, "0/207 files, 0 B/4.36 GB"),
        (57, 207, int(1.23 * GB), int(4.36 * GB), 25.5,
         "57/207 files, 1.23 GB/4.36 GB, 48.2 MB/s, ETA 1m05s"),
        (206, 207, int(4.3 * GB), int(4.36 * GB), 60.0,
         "206/207 files, 4.30 GB/4.36 GB, 71.7 MB/s, ETA 1s"),
        (207, 207, int(4.36 * GB), int(4.36 * GB), 61.2, "all 207 files (4.36 GB) in 1m01s"),
        # No size known (a lock without sizes): files alone, the ETA from the files' rate.
        (10, 200, 0, 0, 5.0, "10/200 files, 2.0 files/s, ETA 1m35s"),
        (200, 200, 0, 0, 99.0, "all 200 files in 1m39s"),
        # Small and slow: kB, and hours for the ETA.
        (1, 3, 2_000, 9_000, 2.0, "1/3 files, 2.00 kB/9.00 kB, 1.0 kB/s, ETA 7s"),
        (1, 9, GB, 100 * GB, 60.0, "1/9 files, 1.00 GB/100.00 GB, 16.7 MB/s, ETA 1h39m"),
    ],
)  # fmt: skip
def test_transfer_words(
    done: int, total: int, got: int, size: int, seconds: float, want: str
) -> None:
    assert transfer_words(done, total, got, size, seconds) == want


@pytest.mark.parametrize(
    ("seconds", "want"),
    [(0, "0s"), (59.4, "59s"), (60, "1m00s"), (3599, "59m59s"), (7380, "2h03m")],
)
def test_duration(seconds: float, want: str) -> None:
    assert duration(seconds) == want


def _fetch(i: int, origin: str = "https://files.pythonhosted.org", size: int = 0) -> Step:
    return Step(
        "fetch",
        name=f"p{i}",
        url=f"{origin}/packages/{i}/p{i}-1-py3-none-any.whl",
        dest=f"/w/releases/{i:064x}/p{i}-1-py3-none-any.whl",
        sha256=f"{i:064x}",
        size=size,
    )


@pytest.mark.parametrize(
    ("fetches", "want"),
    [
        ([_fetch(i, size=21 * 10**6) for i in range(207)],
         "fetch 207 files, 4.35 GB known, each sha256-pinned: the wheel stores first, else "
         "https://files.pythonhosted.org (207) into /w/releases/<sha256>/ (--verbose lists each)"),
        ([_fetch(i, "https://u:secret@pypi.nvidia.com:8443" if i % 3 else "http://127.0.0.1:9")
          for i in range(6)],
         "fetch 6 files, each sha256-pinned: the wheel stores first, else "
         "https://pypi.nvidia.com:8443 (4), http://127.0.0.1:9 (2) into /w/releases/<sha256>/ "
         "(--verbose lists each)"),
    ],
)  # fmt: skip
def test_a_run_of_fetches_is_one_line(fetches: list[Step], want: str) -> None:
    venv = Step("run", argv=["uv", "venv", "/w/env"])
    lines = summary([*fetches, venv, Step("mkdir", path="/w/x")])
    assert lines == [want, "uv venv /w/env", "mkdir -p /w/x"]
    assert "secret" not in lines[0]
    # The commands (--verbose, --json, what provision records) keep every fetch.
    assert len(commands(fetches)) == len(fetches)


def test_a_short_run_of_fetches_is_shown_as_it_is() -> None:
    few = [_fetch(i) for i in range(SUMMARY_RUN - 1)]
    mixed = [*few, Step("mkdir", path="/w/x"), *few]
    assert summary(mixed) == commands(mixed)


def _plain(heartbeat: float) -> tuple[PlainProgress, io.StringIO]:
    out = io.StringIO()
    return PlainProgress(Console(file=out, width=200), heartbeat=heartbeat), out


def test_plain_output_prints_step_starts_and_no_per_file_lines() -> None:
    """A stack step that reports 207 files and 50 polls: one line for its start, none for the
    updates within the heartbeat; each host's end."""
    progress, out = _plain(heartbeat=3600)
    progress.start("provision", ["s1", "s2"], "/runs/x")
    for host in ("s1", "s2"):
        progress.host_started(host)
        progress.step(host, "facts")
        progress.step(host, "stack")
        for i in range(207):
            progress.step(host, f"wheel p{i}", "downloading")
            progress.step(host, "stack", f"fetch {i + 1}/207 files")
        progress.step(host, "stack smoke")
        progress.host_done(host, HostResult(host, status="changed", seconds=3.0))
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 + 2 * 4, lines
    assert not any("wheel" in line or "fetch" in line for line in lines)
    assert sum("[s1] stack (" in line for line in lines) == 1


def test_plain_output_heartbeat_says_the_latest_update() -> None:
    progress, out = _plain(heartbeat=0)  # every update is past the heartbeat
    progress.host_started("s1")
    progress.step("s1", "stack", "fetch 3/207 files")
    assert "[s1] stack fetch 3/207 files (" in out.getvalue()


def test_provision_shows_no_commands_and_plan_a_summary() -> None:
    """`render_plan`: plan shows a step's summary, provision none of its commands, and
    --verbose every one."""
    from sm120kit.output.report import render_plan

    fetches = [_fetch(i, size=GB) for i in range(10)]
    for check_mode, verbose, want in [(True, False, 1), (False, False, 0), (True, True, 10),
                                      (False, True, 10)]:  # fmt: skip
        step = StepResult("stack", "changed", "install", commands=commands(fetches))
        step.summary = summary(fetches)
        result = RunResult(
            "plan" if check_mode else "provision",
            {"s1": HostResult("s1", "changed", steps=[step])},
            check_mode=check_mode,
        )
        out = io.StringIO()
        render_plan(Console(file=out, width=400), result, verbose=verbose)
        assert out.getvalue().count("$ fetch ") == want, (check_mode, verbose, out.getvalue())
