"""The URL rule of a lock's files (remote/lib/obtain.py `url_problem`, used by the lock's
loader, plan and the host's downloader) and the one redaction of a URL's password
(remote/lib/download.py `shown`): pure tables, no network."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.remote.lib.download import redact_text, request_of, shown
from sm120kit.remote.lib.obtain import url_problem
from sm120kit.runner.host_context import LOGGED_MAX, _logged
from sm120kit.stack.index_auth import NetrcError, authed

PY = ["https://files.pythonhosted.org"]


@pytest.mark.parametrize(
    ("url", "indexes", "why"),
    [
        ("https://files.pythonhosted.org/packages/a.whl", PY, None),
        ("HTTPS://FILES.PYTHONHOSTED.ORG/packages/a.whl", PY, None),
        ("https://files.pythonhosted.org:443/packages/a.whl", PY, None),
        ("https://files.pythonhosted.org:8443/packages/a.whl", PY, "not under"),
        ("http://files.pythonhosted.org/packages/a.whl", PY, "not under"),
        ("https://files.pythonhosted.org.evil.com/a.whl", PY, "not under"),
        ("https://files.pythonhosted.org@evil.example/a.whl", PY, "not under"),
        ("https://evil.example@files.pythonhosted.org/a.whl", PY, "not under"),
        ("https://files.pythonhosted.org%2eevil.com/a.whl", PY, "percent-encoded"),
        ("https://files.pythonhosted.org/packages/%2e%2e/a.whl", PY, "percent-encoded"),
        ("https://files.pythonhosted.org/../a.whl", PY, "'..'"),
        ("https://files.pythonhosted.org", PY, "not under"),
        ("file:///etc/passwd", PY, "not under"),
        ("file:///etc/passwd", [], "file://"),
        ("ftp://files.pythonhosted.org/a.whl", PY, "scheme"),
        ("data:text/plain,hello", PY, "scheme"),
        ("packages/a.whl", PY, "scheme"),
        ("/abs/a.whl", PY, "scheme"),
        ("https:///a.whl", PY, "no host"),
        (" https://files.pythonhosted.org/a.whl", PY, "absolute"),
        ("https://files.pythonhosted.org/a b.whl", PY, "control character"),
        ("https://files.pythonhosted.org\\@evil/a.whl", PY, "backslash"),
        ("http://[::1]:8000/files/a.whl", ["http://[::1]:8000/files"], None),
        ("http://[::2]:8000/files/a.whl", ["http://[::1]:8000/files"], "not under"),
        ("http://[::1/a.whl", PY, "not a valid URL"),
        ("http://127.0.0.1:8/files/a.whl", ["http://127.0.0.1:8/files/"], None),
        ("http://127.0.0.1:8/filesx/a.whl", ["http://127.0.0.1:8/files/"], "not under"),
        ("http://127.0.0.1:9/files/a.whl", ["http://127.0.0.1:8/"], "not under"),
        ("https://mirror.example/a.whl", [], None),
        ("https://u:p@mirror.example/a.whl", [], "userinfo"),
        ("https://u:p@idx.example/s/a.whl", ["https://u:p@idx.example/s"], None),
        ("https://idx.example/s/a.whl", ["https://u:p@idx.example/s"], "not under"),
        ("file:///srv/wheels/a.whl", ["file:///srv/wheels"], None),
        ("file:///srv/other/a.whl", ["file:///srv/wheels"], "not under"),
    ],
)  # fmt: skip
def test_a_file_url_must_be_under_one_of_the_locks_indexes(
    url: str, indexes: list[str], why: str | None
) -> None:
    got = url_problem(url, indexes)
    assert (got is None) if why is None else (got is not None and why in got), got


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("https://user:s3cret@host/simple", "https://user:****@host/simple"),
        ("https://user:s3cret@host:8080/a?b#c", "https://user:****@host:8080/a?b#c"),
        ("https://user@host/simple", "https://user@host/simple"),
        ("https://host/simple", "https://host/simple"),
        ("https://us%40er:p%3Ass@host/x", "https://us%40er:****@host/x"),
        ("not a url", "not a url"),
    ],
)  # fmt: skip
def test_a_urls_password_is_never_shown(url: str, want: str) -> None:
    assert shown(url) == want


def test_credentials_in_a_url_become_basic_auth_and_leave_the_url() -> None:
    req = request_of("https://us%40er:p%3Ass@host:8/x.whl")
    assert req.full_url == "https://host:8/x.whl"
    assert req.get_header("Authorization") == "Basic dXNAZXI6cDpzcw=="  # base64 of us@er:p:ss


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("uv pip install --index https://u:pw@h/simple x", "uv pip install --index https://u:****@h/simple x"),
        ('{"url": "http://a:b@h:1/x", "i": "https://c:d@h2/s"}', '{"url": "http://a:****@h:1/x", "i": "https://c:****@h2/s"}'),
        ("mail me at a@b.example: no URL", "mail me at a@b.example: no URL"),
        ("https://user@h/x keeps a bare user", "https://user@h/x keeps a bare user"),
    ],
)  # fmt: skip
def test_every_output_channel_filters_url_passwords(text: str, want: str) -> None:
    assert redact_text(text) == want


def test_the_consoles_and_a_drafted_lock_show_no_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What a person reads (plan, the live view, the recap: every console the tool makes) and
    the lock lock.draft writes from a private index: the password is masked or left out."""
    from sm120kit.output.console import make_console
    from sm120kit.stack.draft import _indexes
    from sm120kit.stack.lock import LockEntry

    line = "fetch of https://me:s3cr3t-T0ken@idx.example/simple/a failed"
    make_console(stderr=True).print(line)
    make_console().print(line)
    out, err = capsys.readouterr()
    assert "s3cr3t" not in out + err and "me:****@idx.example" in err + out
    url = "https://me:s3cr3t-T0ken@idx.example/packages/a-1-py3-none-any.whl"
    entry = LockEntry("a", "1", "a-1-py3-none-any.whl", url, "0" * 64, "release", False)
    assert _indexes([entry]) == ["https://idx.example"]


@pytest.mark.parametrize(
    ("netrc_text", "url", "sent"),
    [
        ("machine idx.example login al password p@ss/w:rd\n", "https://idx.example/simple",
         "https://al:p%40ss%2Fw%3Ard@idx.example/simple"),
        ("machine idx.example login al password pw\n", "https://IDX.example:8443/f/x.whl",
         "https://al:pw@IDX.example:8443/f/x.whl"),
        ("machine idx.example login al password pw\n", "https://other.example/simple",
         "https://other.example/simple"),
        ("machine idx.example login al password pw\n", "https://me:mine@idx.example/simple",
         "https://me:mine@idx.example/simple"),  # the URL's own userinfo wins
        ("machine idx.example login al password pw\n", "file:///idx.example/x.whl",
         "file:///idx.example/x.whl"),
        ("", "https://idx.example/simple", "https://idx.example/simple"),
    ],
)  # fmt: skip
def test_the_hosts_get_the_controllers_netrc_credentials_in_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, netrc_text: str, url: str, sent: str
) -> None:
    """`authed` (sm120kit/stack/index_auth.py) with a real netrc file: the URL a host is sent;
    what any message shows of it has no password."""
    path = tmp_path / "netrc"
    path.write_text(netrc_text)
    path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(path))
    assert authed(url) == sent
    assert "pw" not in redact_text(f"fetching {authed(url)}").replace("mine", "")


def test_a_netrc_that_cannot_be_parsed_is_one_line_naming_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real netrc file with a syntax error: NetrcError with the file and line, no secret."""
    path = tmp_path / "netrc"
    path.write_text("machine idx.example login al password secret1\nmachine\n")
    path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(path))
    with pytest.raises(NetrcError) as info:
        authed("https://idx.example/simple")
    assert str(info.value).startswith(f"{path}:") and "secret1" not in str(info.value)


@pytest.mark.parametrize("before", [0, 10, LOGGED_MAX - 60, LOGGED_MAX - 30, LOGGED_MAX - 20])
def test_a_long_logged_request_is_masked_before_it_is_cut(before: int) -> None:
    """The host log keeps LOGGED_MAX characters of a script's arguments: wherever the cut
    falls, no part of the password is left (masked first, then cut)."""
    text = "x" * before + '"https://alice:s3cr3t-pw@idx.example/simple/"' + "y" * 100
    logged = _logged(text)
    assert len(logged) <= LOGGED_MAX
    assert "s3cr" not in logged and "3t-pw" not in logged
