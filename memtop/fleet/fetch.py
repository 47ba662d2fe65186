"""HTTP/1.1 GETs to one origin, each bounded by a deadline and a byte cap; redirects stay in that origin.

The client is a small reader on the keep-alive socket, not http.client: a cluster of a thousand
nodes makes two hundred requests a second, and http.client's response parsing (its headers go through
the `email` package) cost ~0.4 ms of CPU each, most of the view's cost (bench/RESULTS.md). It reads
only what a GET of /snapshot.json or of Prometheus' API needs: the status line, up to MAX_HEADERS
header lines of at most MAX_HEAD bytes in all, a body framed by Content-Length, by chunks, or by the
close; anything else is refused with the reason.

A socket timeout bounds one socket call, not a request: a server that sends one byte a second never
trips it. Here every call is given what is left of the request's deadline (connect + TLS handshake +
headers + body) as its timeout, and the deadline is checked between calls, so a trickle ends at the
deadline (a TLS read or handshake bounds its own internal waits by one deadline too). The body is
read up to the cap; a Content-Length over the cap is refused before reading. A redirect is followed
only to the same scheme, host and port: the bearer token (and any other header) never travels to an
origin the user did not name.
"""

from __future__ import annotations

import contextlib
import errno
import math
import queue
import re
import selectors
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TypeVar

from memtop.fleet.wire import Refused

MAX_REDIRECTS = 3
MAX_HEAD = 64 << 10  # a status line and its headers (http.client's per-line limit)
MAX_HEADERS = 100  # header lines of one answer, or trailer lines of a chunked one (as http.client)
MAX_CHUNK_LINE = 1024  # a chunk's size line with its extensions, or a line of the trailer
_RECV = 64 << 10  # under glibc's mmap threshold: a recv's buffer is not mapped and unmapped each time
_REDIRECTS = (301, 302, 303, 307, 308)
_NO_BODY = (204, 304)
_FRAMING = (b"content-length", b"transfer-encoding", b"location")  # the headers read, each said once
# what a request line must not carry as it is: non-ASCII, spaces and controls
_UNSAFE = re.compile(r"[^\x21-\x7e]")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # what no header line may carry (a tab may)
_STATUS = re.compile(rb"HTTP/1\.([01]) ([1-5][0-9][0-9])(?: [^\x00-\x08\x0a-\x1f\x7f]*)?")
# a header line: a token, a colon, a value of visible characters, spaces, tabs and obs-text
_FIELD = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*")
_CHUNK = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\x00-\x08\x0a-\x1f\x7f]*)?")


class DeadlineExceeded(TimeoutError):
    pass


T = TypeVar("T")
Steps = Generator[None, bool, T]  # a reader: yields for more bytes, is sent whether more came


def _early_close(what: str) -> ConnectionResetError:
    """The server closed the connection early (an error of the network, not a malformed answer)."""
    return ConnectionResetError(errno.ECONNRESET, f"closed {what}")


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

    def host_header(self) -> str:
        """The Host header: a v6 address in brackets, the port unless it is the scheme's own; a
        name in IDNA (ValueError for one it cannot encode, or one with controls or spaces)."""
        host = self.host if self.host.isascii() else self.host.encode("idna").decode("ascii")
        if _UNSAFE.search(host):
            raise ValueError(f"a host name with spaces or controls: {host!r}")
        host = f"[{host}]" if ":" in host else host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


@dataclass
class Answer:
    status: int
    location: str | None  # the Location header's own bytes, as UTF-8 (surrogate-escaped)
    body: bytearray


class _Conn:
    """One connection's socket and the bytes read from it but not yet used. The readers (until, take,
    rest) are generators that yield when they need more bytes and are sent whether more came (False
    at the end of the stream): one parser for a thread that blocks on its socket (_drive) and for
    the Loop that waits on many."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, bytearray()
        self.used = False  # an answer was read whole on it: a close before the next is the server's right
        self.flight: _Flight | None = None  # the Loop's request on it, while one is in flight
        self.watched = False  # registered with the Loop's selector (it stays so between requests)

    def fill(self, deadline: float) -> bool:
        """More bytes into buf, blocking for at most what is left of the deadline; False at the
        end of the stream."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("deadline")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(_RECV)
        except TimeoutError:  # (its timeout was what was left)
            raise DeadlineExceeded("deadline") from None
        self.buf += data
        return bool(data)

    def until(self, sep: bytes, limit: int, what: str) -> Steps[bytes]:
        """The bytes before `sep` (at most `limit`), consumed with it."""
        start = 0
        while (at := self.buf.find(sep, start)) < 0:
            if len(self.buf) > limit:
                raise Refused(f"bad response: {what} over {limit} bytes")
            start = max(0, len(self.buf) - len(sep) + 1)
            if not (yield):
                raise _early_close(f"inside the {what}")
        if at > limit:
            raise Refused(f"bad response: {what} over {limit} bytes")
        out = bytes(self.buf[:at])
        del self.buf[: at + len(sep)]
        return out

    def take(self, n: int) -> Steps[bytearray]:
        """Exactly n bytes (the buffer itself when it holds just these: a body of tens of MB is
        not copied)."""
        while len(self.buf) < n:
            if not (yield):
                raise _early_close("inside the body")
        if len(self.buf) == n:
            out, self.buf = self.buf, bytearray()
            return out
        out = self.buf[:n]
        del self.buf[:n]
        return out

    def rest(self, limit: int) -> Steps[bytearray]:
        """Everything up to the end of the stream, or the first `limit` bytes of it (in place)."""
        while len(self.buf) < limit and (yield):
            pass
        out, self.buf = self.buf, bytearray()
        del out[limit:]
        return out


def _drive(steps: Steps[T], conn: _Conn, deadline: float) -> T:
    """Run a reader to its end on a blocking socket: each want of bytes is one fill."""
    try:
        next(steps)
        while True:
            steps.send(conn.fill(deadline))
    except StopIteration as e:
        return e.value


class Fetcher:
    """GETs to one origin over one keep-alive connection (a fetcher is used by one thread at a time;
    close() may come from another)."""

    def __init__(
        self, origin: Origin, cap: int, headers: dict[str, str], ctx: ssl.SSLContext | None = None
    ) -> None:
        if (origin.scheme == "https") != (ctx is not None):
            ctx = ssl.create_default_context() if origin.scheme == "https" else None
        self.origin, self.cap, self.headers, self.ctx = origin, cap, headers, ctx
        self._conn: _Conn | None = None
        self._head: tuple[str, bytes] | None = None  # (path, its request): a poller asks for one path
        self._closed = False

    def get(self, path: str, deadline: float) -> tuple[int, bytes | bytearray]:
        """(status, body) of GET path, following same-origin redirects; DeadlineExceeded past
        `deadline` (monotonic), Refused for an answer that is malformed, too large, or a redirect
        elsewhere."""
        for _ in range(MAX_REDIRECTS + 1):
            a = self._once(path, deadline)
            if a.status not in _REDIRECTS or a.location is None:
                return a.status, a.body
            path = self._same_origin(path, a.location)
        raise Refused(f"more than {MAX_REDIRECTS} redirects")

    def loop_conn(self) -> _Conn | None:
        """The kept-alive plain connection a Loop may carry the next request on, if there is one
        (a new connection, TLS and what a redirect asks are done by get())."""
        conn = self._conn
        return conn if conn is not None and conn.used and self.ctx is None and not self._closed else None

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

    def _once(self, path: str, deadline: float) -> Answer:
        request = self._request_bytes(path)
        for attempt in range(2):
            if self._closed:  # close() came while a request ran: no new connection after it
                raise ConnectionAbortedError(errno.ECONNABORTED, "closed by memtop")
            conn = self._conn
            reused = conn is not None and conn.used
            try:
                if conn is None:
                    conn = self._conn = _Conn(self._connect(deadline))
                return self._exchange(conn, request, deadline)
            except (ConnectionResetError, BrokenPipeError):
                self._drop()
                if not reused or attempt:  # a kept-alive connection the server closed: once more
                    raise
            except BaseException:
                self._drop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _request_bytes(self, path: str) -> bytes:
        if self._head is None or self._head[0] != path:
            fields = {"Host": self.origin.host_header(), **self.headers, "Accept-Encoding": "identity"}
            # (identity: without it, a proxy on the way may compress the answer)
            if any(_CONTROL.search(k + v) for k, v in fields.items()):  # (no header of its own)
                raise ValueError("a request header with a control character")
            lines = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
            self._head = (path, f"GET {_wire_path(path)} HTTP/1.1\r\n{lines}\r\n".encode("latin-1"))
        return self._head[1]

    def _connect(self, deadline: float) -> socket.socket:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("deadline")
        try:
            sock = socket.create_connection((self.origin.host, self.origin.port), left)
        except TimeoutError:
            raise DeadlineExceeded("deadline") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.ctx is not None:  # the handshake's waits share one timeout: what is left
                sock.settimeout(max(1e-3, deadline - time.monotonic()))
                sock = self.ctx.wrap_socket(sock, server_hostname=self.origin.host)
        except TimeoutError:
            sock.close()
            raise DeadlineExceeded("deadline") from None
        except BaseException:
            sock.close()
            raise
        return sock

    def _exchange(self, conn: _Conn, request: bytes, deadline: float) -> Answer:
        """One request and its answer; the connection is dropped unless it can carry the next."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("deadline")
        conn.sock.settimeout(left)
        try:
            conn.sock.sendall(request)
        except TimeoutError:
            raise DeadlineExceeded("deadline") from None
        return _drive(self._answer(conn), conn, deadline)

    def _answer(self, conn: _Conn) -> Steps[Answer]:
        """Read the answer to the request just sent on `conn`."""
        if not conn.buf and not (yield):
            raise _early_close("before answering")
        if not conn.buf.startswith(b"HTTP/1."[: len(conn.buf)]):  # said at once, not at the deadline
            raise Refused("bad response: not HTTP/1.x")
        status, keep, headers = yield from self._head_of(conn)
        length = headers.get(b"content-length")
        chunked = headers.get(b"transfer-encoding")
        if status in _NO_BODY:
            body = bytearray()
        elif chunked is not None:
            body = yield from self._chunks(conn)
        elif length is not None:
            body = yield from conn.take(int(length))
        else:  # framed by the close
            keep = False
            body = yield from conn.rest(self.cap + 1)
            if len(body) > self.cap:
                raise Refused(f"bad response: over {self.cap >> 20} MiB")
        conn.used = True
        if not keep or conn.buf:  # more than it said: nothing after it can be trusted to be an answer
            self._drop()
        loc = headers.get(b"location")
        return Answer(status, None if loc is None else loc.decode("utf-8", "surrogateescape"), body)

    def _head_of(self, conn: _Conn) -> Steps[tuple[int, bool, dict[bytes, bytes]]]:
        """The status, whether the connection stays open, and the headers that frame the body."""
        head = yield from conn.until(b"\r\n\r\n", MAX_HEAD, "status line and headers")
        status_line, *lines = head.split(b"\r\n")
        m = _STATUS.fullmatch(status_line)
        if m is None:
            raise Refused("bad response: not HTTP/1.x" if not status_line.startswith(b"HTTP/") else
                          "bad response: a malformed status line")  # fmt: skip
        status = int(m.group(2))
        if status < 200:
            raise Refused(f"bad response: HTTP {status} to a GET")
        if len(lines) > MAX_HEADERS:
            raise Refused(f"bad response: over {MAX_HEADERS} header lines")
        keep = m.group(1) == b"1"
        framing: dict[bytes, bytes] = {}
        for line in lines:
            f = _FIELD.fullmatch(line)
            if f is None:
                raise Refused("bad response: a malformed header line")
            name = f.group(1).lower()
            if name == b"connection":
                keep = keep and b"close" not in f.group(2).lower()
            elif name in _FRAMING and framing.setdefault(name, f.group(2)) != f.group(2):
                raise Refused(f"bad response: two {name.decode()} headers")
        te, length = framing.get(b"transfer-encoding"), framing.get(b"content-length")
        if te is not None and (te.lower() != b"chunked" or length is not None):
            raise Refused("bad response: a transfer encoding other than chunked alone")
        if length is not None:
            if not (length.isdigit() and len(length) <= 18):
                raise Refused("bad response: a malformed Content-Length")
            if int(length) > self.cap:
                raise Refused(f"bad response: over {self.cap >> 20} MiB")
        return status, keep, framing

    def _chunks(self, conn: _Conn) -> Steps[bytearray]:
        body = bytearray()
        while True:
            m = _CHUNK.fullmatch((yield from conn.until(b"\r\n", MAX_CHUNK_LINE, "chunk size line")))
            if m is None:
                raise Refused("bad response: a malformed chunk size")
            size = int(m.group(1), 16)
            if len(body) + size > self.cap:
                raise Refused(f"bad response: over {self.cap >> 20} MiB")
            if not size:
                break
            body += yield from conn.take(size)
            if (yield from conn.take(2)) != b"\r\n":
                raise Refused("bad response: a chunk longer than its size")
        for _ in range(MAX_HEADERS + 1):  # the trailer: header lines up to an empty one, ignored
            if not (yield from conn.until(b"\r\n", MAX_CHUNK_LINE, "trailer line")):
                return body
        raise Refused(f"bad response: over {MAX_HEADERS} trailer lines")

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.sock.close()

    def close(self) -> None:
        """May come from another thread while a request reads: shut the socket first, which ends
        that read (closing it alone would leave the reader blocked, and exit waiting for it)."""
        self._closed = True
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError):  # the plain socket's: an SSLSocket's own would drop
                socket.socket.shutdown(conn.sock, socket.SHUT_RDWR)  # its SSL object under the reader
            conn.sock.close()


class Again(Exception):
    """The Loop did not finish this request: get() asks again (a redirect to follow, or a kept-alive
    connection the server closed, which get() retries on a fresh one)."""


Done = Callable[[tuple[int, bytearray] | BaseException], None]  # (status, body), or why not


class _Flight:
    __slots__ = ("fetcher", "conn", "steps", "deadline", "done")

    def __init__(
        self, fetcher: Fetcher, conn: _Conn, steps: Steps[Answer], deadline: float, done: Done
    ) -> None:
        self.fetcher, self.conn, self.steps, self.deadline, self.done = fetcher, conn, steps, deadline, done


class Loop:
    """GETs on many kept-alive plain connections from one thread (run()): every request of a round
    is sent, then the answers are read as their sockets become readable, by the readers get() uses.
    A thousand nodes polled by a pool of blocking threads cost a GIL hand-off, a timeout set and a
    poll() per socket call; here a GET is a send and a recv, and one wait serves every answer ready
    (bench/RESULTS.md). A connection stays registered with the selector from its first request on
    (registering and unregistering it around each request were two system calls and two Python
    SelectorKeys per GET); one that turns readable with no request in flight (the node closed it,
    or a worker reads it: a redirect, the full snapshot) is unregistered, and registered again by
    its next request. The wait ends at the earliest deadline of the requests in flight, whose scan
    then ends those past theirs: a trickling node ends at its deadline, and a round of a thousand
    requests answered in time is scanned at most once."""

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._new: queue.SimpleQueue[tuple[Fetcher, str, float, Done]] = queue.SimpleQueue()
        self._closed = False
        self._flying: set[_Conn] = set()  # the connections with a request in flight
        self._due = math.inf  # no request in flight ends before this (monotonic)

    def submit(self, fetcher: Fetcher, path: str, deadline: float, done: Done) -> bool:
        """Queue GET path on the fetcher's kept-alive connection; False when it has none (use get()).
        `done` is called from the loop's thread; wake() starts what was queued."""
        if fetcher.loop_conn() is None:
            return False
        self._new.put((fetcher, path, deadline, done))
        return True

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # (full: a wake-up is already pending)
            self._wake_w.send(b"w")

    def close(self) -> None:
        """The loop ends at its next wake-up; requests in flight are dropped unanswered."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"w")

    def run(self) -> None:
        try:
            while not self._closed:
                busy = bool(self._flying)
                if not busy:
                    self._due = math.inf
                timeout = None if not busy else max(0.0, self._due - time.monotonic())
                for key, _ in self._sel.select(timeout):
                    conn = key.data
                    if conn is None:
                        self._start_new()
                    elif conn.flight is not None:
                        self._read(conn.flight)
                    else:  # no request of the loop's on it: the node closed it, or a worker reads it
                        self._unwatch(conn)
                if busy and (now := time.monotonic()) >= self._due:
                    self._expire(now)
        finally:
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()

    def _expire(self, now: float) -> None:
        """End the requests past their deadline; the next wait ends at the earliest of the others'."""
        due = math.inf
        for conn in list(self._flying):
            f = conn.flight
            if f is None:
                continue
            if f.deadline <= now:
                self._end(f, DeadlineExceeded("deadline"))
            else:
                due = min(due, f.deadline)
        self._due = due

    def _start_new(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(4096):
                pass
        with contextlib.suppress(queue.Empty):
            while not self._closed:
                self._start(*self._new.get_nowait())

    def _start(self, fetcher: Fetcher, path: str, deadline: float, done: Done) -> None:
        conn = fetcher.loop_conn()
        if conn is None:  # closed since it was queued
            return done(Again())
        try:
            request = fetcher._request_bytes(path)
            if conn.sock.gettimeout() != 0.0:  # (a system call: only after a worker used it)
                conn.sock.settimeout(0.0)
            if conn.sock.send(request) != len(request):  # (a request of a few hundred bytes on an
                raise ConnectionResetError(errno.ECONNRESET, "send")  # idle connection: never seen)
            if not conn.watched:
                self._watch(conn)
        except Exception as e:
            self._unwatch(conn)
            fetcher._drop()
            return done(Again() if isinstance(e, ConnectionError) else e)
        f = conn.flight = _Flight(fetcher, conn, fetcher._answer(conn), deadline, done)
        next(f.steps)  # (no answer can be there yet: the connection's buffer was empty)
        self._flying.add(conn)
        self._due = min(self._due, deadline)

    def _watch(self, conn: _Conn) -> None:
        try:
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        except KeyError:  # its number was a watched socket's that a worker closed (the kernel
            self._sel.unregister(conn.sock.fileno())  # dropped that one from the epoll set then)
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        conn.watched = True

    def _unwatch(self, conn: _Conn) -> None:
        if conn.watched:
            conn.watched = False
            with contextlib.suppress(KeyError, ValueError, OSError):  # (the answer may have closed it)
                self._sel.unregister(conn.sock)

    def _read(self, f: _Flight) -> None:
        try:
            data = f.conn.sock.recv(_RECV)
        except BlockingIOError:
            return
        except OSError as e:
            return self._end(f, e)
        f.conn.buf += data
        try:
            f.steps.send(bool(data))
        except StopIteration as e:
            self._end(f, e.value)
        except Exception as e:  # malformed (Refused), cut short (a reset), or a fault of memtop's
            self._end(f, e)

    def _end(self, f: _Flight, got: Answer | BaseException) -> None:
        conn = f.conn
        conn.flight = None
        self._flying.discard(conn)
        if isinstance(got, Answer):
            if f.fetcher._conn is not conn:  # the answer ended the connection (a close, or more
                self._unwatch(conn)  # bytes than it said)
            return f.done(Again() if got.status in _REDIRECTS and got.location else (got.status, got.body))
        self._unwatch(conn)
        f.steps.close()
        f.fetcher._drop()
        f.done(Again() if isinstance(got, (ConnectionResetError, BrokenPipeError)) else got)


def _wire_path(path: str) -> str:
    """The path as a request line carries it: non-ASCII, spaces and controls percent-encoded as
    UTF-8 (argv's undecodable bytes, surrogate-escaped, as they were)."""
    return _UNSAFE.sub(lambda m: urllib.parse.quote(m.group(), safe="", errors="surrogateescape"), path)
