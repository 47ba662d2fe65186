"""HTTP GETs to one origin, each bounded by a deadline and a byte cap; redirects stay in that origin.

A socket timeout bounds each recv, not a request: a server that sends one byte a second (a header
line every two) never trips it. Here each request has a deadline for connect + headers + body; one
thread (Deadlines) shuts down the socket of a request past its deadline, which ends whatever
recv the request was blocked in. The body is read up to the cap, a Content-Length over the cap is
refused before reading. A redirect is followed only to the same scheme, host and port: the bearer
token (and any other header) never travels to an origin the user did not name.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

from memtop.fleet.wire import Refused

MAX_REDIRECTS = 3
_REDIRECTS = (301, 302, 303, 307, 308)
# what http.client refuses in a request line: non-ASCII (UnicodeEncodeError), spaces and controls
_UNSAFE = re.compile(r"[^\x21-\x7e]")


class DeadlineExceeded(TimeoutError):
    pass


@dataclass(frozen=True)
class Origin:
    scheme: str  # http or https
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Origin:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s):// URL: {url!r}")
        return cls(u.scheme, u.hostname.lower(), u.port or (443 if u.scheme == "https" else 80))


class Deadlines:
    """One daemon thread that shuts down the sockets of requests past their deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active: dict[int, tuple[float, http.client.HTTPConnection]] = {}
        self._expired: set[int] = set()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watch(self, conn: http.client.HTTPConnection, deadline: float) -> Iterator[set[int]]:
        """While the block runs, `conn` is shut at `deadline`; `id(conn) in` the yielded set then."""
        key = id(conn)
        with self._cond:
            self._active[key] = (deadline, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memtop-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield self._expired
        finally:
            with self._cond:
                self._active.pop(key, None)
                self._expired.discard(key)  # read inside the block: nothing to keep

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for key, (deadline, conn) in list(self._active.items()):
                    if deadline <= now:
                        del self._active[key]
                        self._expired.add(key)
                        _shut(conn)
                nxt = min((d for d, _ in self._active.values()), default=None)
                self._cond.wait(None if nxt is None else max(0.0, nxt - now))


def _shut(conn: http.client.HTTPConnection) -> None:
    """End the blocked recv: shutdown on the plain socket (an SSLSocket's own shutdown would drop its
    SSL object under the reading thread)."""
    s = conn.sock
    if s is not None:
        with contextlib.suppress(OSError):
            socket.socket.shutdown(s, socket.SHUT_RDWR)


DEADLINES = Deadlines()


class _Conn(http.client.HTTPConnection):
    """One connection to the origin; TLS when a context is given. The socket is set before the TLS
    handshake, so the deadline also bounds a handshake that trickles."""

    def __init__(self, origin: Origin, ctx: ssl.SSLContext | None) -> None:
        super().__init__(origin.host, origin.port)
        self.ctx = ctx

    def connect(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ctx is not None:
            self.sock = self.ctx.wrap_socket(self.sock, server_hostname=self.host)


class Fetcher:
    """GETs to one origin over one keep-alive connection (a fetcher is used by one thread at a time)."""

    def __init__(
        self, origin: Origin, cap: int, headers: dict[str, str], ctx: ssl.SSLContext | None = None
    ) -> None:
        if (origin.scheme == "https") != (ctx is not None):
            ctx = ssl.create_default_context() if origin.scheme == "https" else None
        self.origin, self.cap, self.headers, self.ctx = origin, cap, headers, ctx
        self._conn: _Conn | None = None

    def get(self, path: str, deadline: float) -> tuple[int, bytes | bytearray]:
        """(status, body) of GET path, following same-origin redirects; DeadlineExceeded past
        `deadline` (monotonic), Refused for an answer too large or a redirect elsewhere."""
        for _ in range(MAX_REDIRECTS + 1):
            status, location, body = self._once(path, deadline)
            if status not in _REDIRECTS or location is None:
                return status, body
            # http.client decodes header bytes as latin-1: the Location's own bytes again, as UTF-8
            path = self._same_origin(path, location.encode("latin-1").decode("utf-8", "surrogateescape"))
        raise Refused(f"more than {MAX_REDIRECTS} redirects")

    def _same_origin(self, path: str, location: str) -> str:
        base = f"{self.origin.scheme}://{self.origin.host}:{self.origin.port}{path}"
        target = urllib.parse.urljoin(base, location)
        try:
            same = Origin.parse(target) == self.origin
        except ValueError:
            same = False
        if not same:
            raise Refused("redirect to another origin refused")  # the token stays with its origin
        u = urllib.parse.urlsplit(target)
        return (u.path or "/") + (f"?{u.query}" if u.query else "")

    def _once(self, path: str, deadline: float) -> tuple[int, str | None, bytes | bytearray]:
        for attempt in range(2):
            reused = self._conn is not None and self._conn.sock is not None
            try:
                return self._request(path, deadline)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if not reused or attempt:  # a kept-alive connection the server closed: once more
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(self, path: str, deadline: float) -> tuple[int, str | None, bytes | bytearray]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("deadline")
        if self._conn is None:
            self._conn = _Conn(self.origin, self.ctx)
        conn = self._conn
        conn.timeout = left  # bounds connect(), which happens before the socket can be shut
        if conn.sock is not None:
            conn.sock.settimeout(left)
        with DEADLINES.watch(conn, deadline) as expired:
            try:
                conn.request("GET", _wire_path(path), headers=self.headers)
                r = conn.getresponse()
                length = r.getheader("Content-Length", "")
                if length.isdigit() and int(length) > self.cap:
                    raise Refused(f"bad response: over {self.cap >> 20} MiB")
                body = _read(r, self.cap + 1)
            except BaseException:
                conn.close()
                # whatever the shut socket raised, or a recv timed out (its timeout is what was left):
                # the deadline passed
                if id(conn) in expired or time.monotonic() >= deadline:
                    raise DeadlineExceeded("deadline") from None
                raise
        if len(body) > self.cap:
            conn.close()
            raise Refused(f"bad response: over {self.cap >> 20} MiB")
        if not r.isclosed():  # the server sent more than it said: this connection is not reusable
            conn.close()
        return r.status, r.getheader("Location"), body

    def close(self) -> None:
        """May come from another thread while a request reads: shut the socket first, which ends
        that read (closing it alone would leave the reader blocked, and exit waiting for it)."""
        if self._conn is not None:
            _shut(self._conn)
            self._conn.close()


def _read(r: http.client.HTTPResponse, limit: int) -> bytearray:
    """Up to `limit` bytes of the body, grown in place (read(limit) of a body without a length
    buffers it twice: 45 MB took 209 MiB of RSS)."""
    body = bytearray()
    while len(body) < limit and (chunk := r.read(min(1 << 20, limit - len(body)))):
        body += chunk
    return body


def _wire_path(path: str) -> str:
    """The path as a request line carries it: non-ASCII, spaces and controls percent-encoded as
    UTF-8 (argv's undecodable bytes, surrogate-escaped, as they were)."""
    return _UNSAFE.sub(lambda m: urllib.parse.quote(m.group(), safe="", errors="surrogateescape"), path)
