"""The SSH sessions of one host: a limiter that fits any sshd MaxSessions >= 1, and a
keepalive that notices a host that stopped answering.

sshd allows a connection MaxSessions sessions at once (OpenSSH sshd_config(5): "Specifies
the maximum number of open shell, login or subsystem (e.g. sftp) sessions permitted per
network connection", default 10; beyond it the channel open is refused). A run needs more
than that at times: a stack step holds a download service for its whole life, lends SFTP
sessions and runs commands beside it from several threads, and a timed-out command is
killed over a session of its own. So a host's sessions come from a pool of connections
(`Sessions`), each filled up to the limit:

- A thread that holds no session waits (queued) for one when every connection of the pool
  is full and the pool has ``SESSION_BUDGET`` sessions' worth of connections.
- A thread that already holds one (a command run inside an SFTP block), a long-lived
  service, and a kill never wait: they get a new connection when every one is full. A thread
  therefore never waits on a session it holds itself, and a service that holds a session
  for hours never starves the commands its step still has to run.
- An idle SFTP session kept for the next copy is closed for a waiter (`reclaim`).
- sshd may allow fewer sessions than the setting ``ssh_max_sessions`` says: a session it
  refuses while others are open on that connection lowers the pool's limit to what was open
  (the refused one goes to another connection); one refused with none other open is a
  one-line error naming the host, never a hang. A refusal may be transient (a session sshd
  has not yet reaped), so the limit is not lowered for good (`SessionLimit`): after
  ``PROBE_AFTER`` sessions opened without a refusal it is raised by one, up to the setting;
  a refusal right at a raised limit (the real MaxSessions) doubles the sessions needed
  before the next raise, so a host whose sshd really allows few pays one refused channel open
  per ever longer stretch.

Each connection of the pool is watched (`_watch`): every so often a global request that
wants a reply (OpenSSH answers every global request, with failure for those it does not
know: serverloop.c server_input_global_request) goes out; when none comes back for the
``ssh_silence_timeout`` setting's seconds, the peer is not answering (a stopped sshd, a
host gone from the network with the TCP connection still up) and the connection is closed,
with the reason kept (`Link.silent`) for the error of whatever waited on it. A command that
prints nothing for hours on a connection that answers is not touched: its own timeout, if it
has one, bounds it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from paramiko.common import cMSG_GLOBAL_REQUEST
from paramiko.message import Message

from ..errors import HostUnreachable, Interrupted
from .channels import open_channel, refused

#: How many sessions at once a host's pool may reach before a thread holding none waits: what
#: one connection with sshd's default MaxSessions (10) gave a run before the pool existed.
SESSION_BUDGET = 10

#: Seconds of no answer to a keepalive after which a connection is closed as silent.
DEFAULT_SILENCE = 90.0

#: The keepalive's request name: OpenSSH's own client sends this one (clientloop.c).
KEEPALIVE_REQUEST = "keepalive@openssh.com"


#: Sessions opened without a refusal after which a lowered limit is raised by one.
PROBE_AFTER = 8
#: The most sessions the raise waits for (doubled from PROBE_AFTER by each failed raise).
PROBE_AFTER_MAX = 1024


@dataclass
class SessionLimit:
    """The pool's session limit per connection: lowered by a refusal to what was open,
    raised by one again after `need` sessions opened without one (up to `setting`). Pure:
    the policy the table in tests/fleet/test_ssh_sessions.py walks."""

    setting: int
    value: int = 0
    need: int = PROBE_AFTER
    streak: int = 0  # sessions opened since the last change
    raised: bool = False  # the last change was a raise (a probe)

    def __post_init__(self) -> None:
        self.setting = max(1, self.setting)
        self.value = self.value or self.setting

    def refused(self, others: int) -> bool:
        """sshd refused a session while `others` were open on its connection: whether this
        lowered the limit (first at this level: worth a note)."""
        self.streak = 0
        if others >= self.value:
            return False
        probe_failed = self.raised and others == self.value - 1
        self.need = min(self.need * 2, PROBE_AFTER_MAX) if probe_failed else self.need
        self.value, self.raised = max(1, others), False
        return not probe_failed

    def opened(self) -> bool:
        """A session opened: whether the limit was raised by it."""
        if self.value >= self.setting:
            return False
        self.streak += 1
        if self.streak < self.need:
            return False
        self.value, self.streak, self.raised = self.value + 1, 0, True
        return True


@dataclass(eq=False)
class Link:
    """One SSH connection of a host's pool and the sessions open on it."""

    conn: Any  # a fabric Connection
    limit: int  # 0: retired (a session refused with none other open), closed once idle
    used: int = 0
    opened: int = 0  # sessions ever opened on it
    adopted: bool = False  # the host's first connection: others use it, never closed here
    #: Why the watchdog closed it ("no reply for 90 s (keepalive unanswered)"), else None.
    silent: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def transport(self) -> Any:
        return self.conn.client.get_transport()

    def active(self) -> bool:
        transport = self.transport
        return transport is not None and transport.is_active()


class Lease:
    """One session of the pool, taken until `release` (idempotent)."""

    def __init__(self, pool: Sessions, link: Link) -> None:
        self.pool = pool
        self.link = link
        self._released = False

    @property
    def transport(self) -> Any:
        return self.link.transport

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.pool._give_back(self.link)


class Sessions:
    """The session limiter of one host (see the module docstring)."""

    def __init__(
        self,
        dial: Callable[[], Any],
        limit: int,
        where: str,
        *,
        silence: float = DEFAULT_SILENCE,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        self._dial = dial
        self._limit = SessionLimit(limit)
        self._setting = limit
        self._where = where
        self.silence = silence
        self._cancelled = cancelled
        self.links: list[Link] = []
        self._dialing = 0
        self._cond = threading.Condition()
        self._held = threading.local()
        #: Closes one idle kept session (an SFTP client) for a waiter; True when it did.
        self.reclaim: Callable[[], bool] = lambda: False
        #: Told what the pool learned of sshd (a refused session): the host's log.
        self.note: Callable[[str], None] = lambda text: None

    def adopt(self, conn: Any) -> Link:
        """Put an already open connection in the pool (the host's first)."""
        link = Link(conn, self.limit, adopted=True)
        with self._cond:
            self.links.append(link)
        self._start_watch(link)
        return link

    @property
    def limit(self) -> int:
        """Sessions per connection the pool opens now (`SessionLimit`)."""
        return self._limit.value

    def _cap(self) -> int:
        return max(1, -(-SESSION_BUDGET // self.limit))

    def lease(self, *, urgent: bool = False) -> Lease:
        """A session slot; `urgent` (or one this thread already holds) never waits."""
        urgent = urgent or getattr(self._held, "count", 0) > 0
        while True:
            with self._cond:
                self.links = [x for x in self.links if x.active() or x.used > 0]
                for link in self.links:
                    if link.used < min(link.limit, self.limit) and link.active():
                        link.used += 1
                        return Lease(self, link)
                dial = urgent or len(self.links) + self._dialing < self._cap()
                if dial:
                    self._dialing += 1
            if dial:
                break
            if self.reclaim():
                continue
            if self._cancelled():
                raise Interrupted("cancelled")
            with self._cond:
                self._cond.wait(0.5)
        try:
            conn = self._dial()
        finally:
            with self._cond:
                self._dialing -= 1
        link = Link(conn, self.limit, used=1)
        with self._cond:
            self.links.append(link)
        self._start_watch(link)
        return Lease(self, link)

    def _give_back(self, link: Link) -> None:
        retired = False
        with self._cond:
            link.used -= 1
            if link.used == 0 and (not link.active() or (link.limit == 0 and not link.adopted)):
                link.stop.set()
                retired = link.limit == 0 and link in self.links
                if retired:
                    self.links.remove(link)
            self._cond.notify_all()
        if retired:
            try:
                link.conn.close()
            except Exception:  # noqa: BLE001 - closing a connection that already broke
                pass

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Within the block this thread counts as holding a session (its nested leases never
        wait: nothing it holds can be given back while it waits)."""
        self._held.count = getattr(self._held, "count", 0) + 1
        try:
            yield
        finally:
            self._held.count -= 1

    def channel(self, lease: Lease) -> Any:
        """A session channel for `lease`, moved to another connection when sshd refuses it
        while other sessions are open on its own (sshd allows fewer than the setting)."""
        while True:
            try:
                channel = open_channel(lease.transport)
            except Exception as exc:
                if not refused(exc, lease.transport):
                    raise
                with self._cond:
                    link = lease.link
                    others = link.used - 1
                    if others < 1 and not link.opened:
                        raise HostUnreachable(
                            f"host {self._where}: sshd refused an SSH session although none other "
                            "was open on the connection (its MaxSessions allows none; setting "
                            f"ssh_max_sessions is {self._setting})"
                        ) from None
                    # None other open, on a connection that had sessions: sshd has not yet
                    # reaped one of them (transient); that connection takes no more.
                    learned = others >= 1 and self._limit.refused(others)
                    link.limit = min(link.limit, others) if others >= 1 else 0
                if learned:
                    self.note(
                        f"sshd allows {others} session(s) per connection (MaxSessions), fewer "
                        f"than setting ssh_max_sessions ({self._setting}); using more connections"
                    )
                lease.release()
                fresh = self.lease(urgent=True)
                lease.link, lease._released = fresh.link, False
                continue
            with self._cond:
                lease.link.opened += 1
                if self._limit.opened():
                    # Every connection may take one more again (a refusal lowered them).
                    for link in self.links:
                        if link.limit:
                            link.limit = max(link.limit, self._limit.value)
            return channel

    def _start_watch(self, link: Link) -> None:
        if self.silence > 0:
            threading.Thread(
                target=self._watch, args=(link,), name=f"keepalive-{self._where}", daemon=True
            ).start()

    def _watch(self, link: Link) -> None:
        """Close `link` when a keepalive is not answered within `silence` seconds."""

        interval = min(15.0, self.silence / 4)
        while not link.stop.wait(interval):
            transport = link.transport
            if transport is None or not transport.is_active():
                return
            answered = threading.Event()
            # paramiko sets this event on REQUEST_SUCCESS or REQUEST_FAILURE (transport.py
            # _parse_request_success/_failure); nothing else here sends global requests.
            transport.completion_event = answered
            message = Message()
            message.add_byte(cMSG_GLOBAL_REQUEST)
            message.add_string(KEEPALIVE_REQUEST)
            message.add_boolean(True)
            try:
                transport._send_user_message(message)
            except Exception:  # noqa: BLE001 - the connection went away: nothing to watch
                return
            if not answered.wait(self.silence) and transport.is_active():
                link.silent = f"no reply for {self.silence:g} s (keepalive unanswered)"
                transport.close()
                with self._cond:
                    self._cond.notify_all()
                return

    def close(self) -> None:
        """Close every connection of the pool."""
        with self._cond:
            links, self.links = self.links, []
        for link in links:
            link.stop.set()
            try:
                link.conn.close()
            except Exception:  # noqa: BLE001 - closing a connection that already broke
                pass


__all__ = [
    "DEFAULT_SILENCE",
    "PROBE_AFTER",
    "SESSION_BUDGET",
    "Lease",
    "Link",
    "SessionLimit",
    "Sessions",
]
