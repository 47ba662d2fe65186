"""memtop.fleet.fetch, the HTTP/1.1 reader under `memtop cluster`, against real servers on loopback:
what it reads (lengths, chunks, the close, keep-alive and a closed kept-alive connection) and what it
refuses, each with its reason (oversized or malformed heads, bad chunks, a non-HTTP answer, a
trickling node, a redirect carrying the token elsewhere). No assertion on time: a refusal that must
come before the deadline is tested under a deadline of an hour."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest
from hostile_net import Server, redirect, send

from memtop.fleet.fetch import MAX_HEAD, MAX_HEADERS, DeadlineExceeded, Fetcher, Origin
from memtop.fleet.sources import HttpPoller
from memtop.fleet.view import NodeState
from memtop.fleet.wire import Refused

HOUR = 3600.0
CAP = 1 << 20
TOKEN = {"Authorization": "Bearer s3cret-token"}


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def _fetcher(port: int, host: str = "127.0.0.1") -> Fetcher:
    return Fetcher(Origin("http", host, port), CAP, dict(TOKEN))


def _get(port: int, deadline_s: float = HOUR) -> tuple[int, bytes]:
    f = _fetcher(port)
    try:
        status, body = f.get("/snapshot.json", time.monotonic() + deadline_s)
    finally:
        f.close()
    return status, bytes(body)


def raw(data: bytes, close: bool = False) -> Callable:
    """Answers every request with `data` as it is; with `close`, then ends the connection."""

    def respond(sock: socket.socket, path: str) -> None:
        sock.sendall(data)
        if close:
            sock.shutdown(socket.SHUT_WR)

    return respond


def test_bodies_by_length_by_chunks_and_by_the_close(server):
    chunked = raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n")  # fmt: skip
    assert _get(server.add(send(b'{"a":1}'))) == (200, b'{"a":1}')
    assert _get(server.add(chunked)) == (200, b"hello, world")
    assert _get(server.add(send(b"to the end", length=False))) == (200, b"to the end")
    assert _get(server.add(raw(b"HTTP/1.1 204 No Content\r\n\r\n"))) == (204, b"")


def test_one_connection_is_kept_and_a_closed_one_is_opened_again(server):
    """Three GETs on one kept-alive connection; a server that closes it after each answer (without
    saying so) costs a retry on a fresh connection, not an error."""
    peers: list[int] = []

    def counted(sock: socket.socket, path: str) -> None:
        peers.append(sock.getpeername()[1])  # the client's port: one per connection
        send(b"{}")(sock, path)

    f = _fetcher(server.add(counted))
    for _ in range(3):
        assert f.get("/snapshot.json", time.monotonic() + HOUR) == (200, b"{}")
    f.close()
    assert len(peers) == 3 and len(set(peers)) == 1
    f = _fetcher(server.add(raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", close=True)))
    for _ in range(3):
        assert f.get("/snapshot.json", time.monotonic() + HOUR) == (200, b"{}")
    f.close()


def _refused(server: Server, answer: bytes, close: bool = False) -> str:
    with pytest.raises(Refused) as e:
        _get(server.add(raw(answer, close)))
    return str(e.value)


def test_malformed_heads_are_refused_with_a_reason(server):
    ok = b"HTTP/1.1 200 OK\r\n"
    assert _refused(server, ok + b"X: " + b"a" * MAX_HEAD + b"\r\n\r\n") == (
        f"bad response: status line and headers over {MAX_HEAD} bytes"
    )
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS + 1))
    assert _refused(server, ok + many + b"Content-Length: 0\r\n\r\n") == (
        f"bad response: over {MAX_HEADERS} header lines"
    )
    assert _refused(server, b"HTTP/1.1 2000 OK\r\n\r\n") == "bad response: a malformed status line"
    assert _refused(server, b"HTTP/1.1 200 OK\x1b]0;x\x07\r\n\r\n") == "bad response: a malformed status line"
    assert _refused(server, ok + b"no colon here\r\n\r\n") == "bad response: a malformed header line"
    assert (
        _refused(server, ok + b"X-Title: \x1b]0;pwned\x07\r\n\r\n") == "bad response: a malformed header line"
    )
    assert _refused(server, ok + b" folded: line\r\n\r\n") == "bad response: a malformed header line"
    assert _refused(server, ok + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}") == (
        "bad response: two content-length headers"
    )
    assert _refused(server, ok + b"Content-Length: -1\r\n\r\n") == "bad response: a malformed Content-Length"
    assert _refused(server, ok + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}") == (
        "bad response: a transfer encoding other than chunked alone"
    )
    assert _refused(server, ok + b"Transfer-Encoding: gzip\r\n\r\n") == (
        "bad response: a transfer encoding other than chunked alone"
    )
    assert _refused(server, b"HTTP/1.1 100 Continue\r\n\r\n") == "bad response: HTTP 100 to a GET"
    assert _refused(server, ok + b"Content-Length: %d\r\n\r\n" % (CAP + 1)) == "bad response: over 1 MiB"


def test_bad_chunks_are_refused(server):
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert _refused(server, head + b"zz\r\nhello\r\n0\r\n\r\n") == "bad response: a malformed chunk size"
    assert _refused(server, head + b"-5\r\nhello\r\n0\r\n\r\n") == "bad response: a malformed chunk size"
    assert _refused(server, head + b"3\r\nhello\r\n0\r\n\r\n") == "bad response: a chunk longer than its size"
    assert _refused(server, head + b"1" * 2000 + b"\r\n") == ("bad response: chunk size line over 1024 bytes")
    # a chunk size that adds up past the cap: refused before its bytes are read
    assert (
        _refused(server, head + b"100000\r\n" + b"x" * (1 << 20) + b"\r\n1\r\n") == "bad response: over 1 MiB"
    )
    assert _refused(server, head + b"fffffffffffffff\r\n") == "bad response: over 1 MiB"
    assert _refused(server, head + b"0\r\nX: " + b"t" * 2000 + b"\r\n\r\n") == (
        "bad response: trailer line over 1024 bytes"
    )
    trailers = b"".join(b"X-%d: t\r\n" % i for i in range(MAX_HEADERS + 1))
    assert _refused(server, head + b"0\r\n" + trailers + b"\r\n") == (
        f"bad response: over {MAX_HEADERS} trailer lines"
    )


def test_a_non_http_answer_is_refused_at_once(server):
    """An ssh banner (or any other service) on the node's port: refused on its first bytes, not at
    the deadline (an hour here), and the connection left open by the other side does not matter."""
    assert _refused(server, b"SSH-2.0-OpenSSH_9.6\r\n") == "bad response: not HTTP/1.x"
    assert _refused(server, b"\x16\x03\x01\x00\xa5") == "bad response: not HTTP/1.x"  # a TLS record


def test_an_answer_cut_short_is_a_network_error_not_a_refusal(server):
    with pytest.raises(ConnectionResetError, match="closed inside the body"):
        _get(server.add(raw(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", close=True)))
    with pytest.raises(ConnectionResetError, match="closed before answering"):
        _get(server.add(raw(b"", close=True)))


def _slowloris(every: float) -> Callable:
    """Headers without end, one byte every `every` seconds: only a deadline ends it."""

    def respond(sock: socket.socket, path: str) -> None:
        data = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 10_000
        for i in range(len(data)):
            sock.sendall(data[i : i + 1])
            time.sleep(every)

    return respond


def test_a_slow_loris_node_ends_at_its_deadline(server):
    """The per-recv timeout never trips (a byte comes every 0.2 s); the request's deadline does."""
    port = server.add(_slowloris(0.2))
    with pytest.raises(DeadlineExceeded):
        _get(port, deadline_s=1.0)
    node = NodeState(f"127.0.0.1:{port}")
    p = HttpPoller([node], 0, timeout=1.0)
    p.poll_all()
    p.close()
    assert node.error == "timeout (deadline)" and node.snapshot is None


def test_a_redirect_with_the_token_stays_in_its_origin(server):
    """A redirect to another host, another port or another scheme is refused before anything is
    sent there; one within the origin is followed, with the token."""
    elsewhere = Server("127.0.0.2")
    try:
        catch = elsewhere.add(send(b"{}"))
        for location in (
            f"http://127.0.0.2:{catch}/snapshot.json",
            f"http://127.0.0.1:{catch}/snapshot.json",
            f"https://127.0.0.1:{catch}/snapshot.json",
            f"//127.0.0.2:{catch}/x",
        ):
            with pytest.raises(Refused, match="redirect to another origin refused"):
                _get(server.add(redirect(location)))
        assert elsewhere.seen == []
    finally:
        elsewhere.close()
    hop = server.add(lambda sock, p: (send(b"x") if p == "/there" else redirect("/there"))(sock, p))
    assert _get(hop) == (200, b"x")
    assert [h.get("authorization") for _, _, h in server.seen[-2:]] == ["Bearer s3cret-token"] * 2


def test_paths_and_hosts_on_the_request_line(server):
    f = _fetcher(server.add(send(b"{}")))
    assert f.get("/ä b\x01?q=ü", time.monotonic() + HOUR) == (200, b"{}")
    f.close()
    port, line, headers = server.seen[-1]
    assert line == "GET /%C3%A4%20b%01?q=%C3%BC HTTP/1.1"
    assert headers["host"] == f"127.0.0.1:{port}" and headers["accept-encoding"] == "identity"
    assert Origin("http", "::1", 80).host_header() == "[::1]"
    assert Origin("https", "bücher.example", 8443).host_header() == "xn--bcher-kva.example:8443"
    with pytest.raises(ValueError, match="control character"):
        Fetcher(Origin("http", "127.0.0.1", 1), CAP, {"X": "a\r\nInjected: 1"}).get("/", time.monotonic() + 1)


# -- the Loop: second and later polls of a node, on its kept-alive connection ----------------------
SNAP = b'{"gpus":[]}'


def _then(first: Callable, later: Callable) -> Callable:
    """Answers the first request with `first`, every later one with `later`."""
    seen: list[str] = []

    def respond(sock: socket.socket, path: str) -> None:
        seen.append(path)
        (first if len(seen) == 1 else later)(sock, path)

    return respond


def _polled(ports: list[int], rounds: int, timeout: float = HOUR) -> tuple[list[NodeState], list[str]]:
    """Nodes after `rounds` polls, and the threads that handed their answers over."""
    nodes = [NodeState(f"127.0.0.1:{p}") for p in ports]
    by: list[str] = []
    for n in nodes:
        receive = n.receive
        n.receive = lambda b, r=receive: (by.append(threading.current_thread().name), r(b))[1]  # type: ignore[method-assign]
    p = HttpPoller(nodes, 0, timeout=timeout)
    try:
        for _ in range(rounds):
            p.poll_all()
    finally:
        p.close(wait=True)
    return nodes, by


def test_the_loop_carries_later_polls_on_the_kept_connection(server):
    """The first poll opens the connection (a worker); the next ones are the loop's, on that same
    connection."""
    peers: list[int] = []

    def counted(sock: socket.socket, path: str) -> None:
        peers.append(sock.getpeername()[1])
        send(SNAP)(sock, path)

    (node,), by = _polled([server.add(counted)], 3)
    assert (node.polls, node.failures, node.error) == (3, 0, None)
    assert by == ["poll_0", "poll_loop", "poll_loop"] and len(set(peers)) == 1


def test_a_node_trickling_on_its_kept_connection_ends_at_its_deadline(server):
    """Answered once, then one byte every 0.2 s: the loop ends it at the deadline, and a healthy
    node polled in the same rounds is answered every time."""
    slow = server.add(_then(send(SNAP), _slowloris(0.2)))
    (s, ok), _ = _polled([slow, server.add(send(SNAP))], 2, timeout=1.0)
    assert s.error == "timeout (deadline)" and (s.polls, s.failures) == (2, 1)
    assert (ok.polls, ok.failures) == (2, 0)


def test_the_loop_hands_closed_connections_and_redirects_to_a_worker(server):
    """A kept connection the server closed is retried on a fresh one; a redirect is followed by a
    worker within the origin, and one to another origin is refused there."""
    closing = server.add(raw(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n" + SNAP, close=True))
    hop = server.add(lambda sock, p: (send(SNAP) if p == "/there" else redirect("/there"))(sock, p))
    away = server.add(_then(send(SNAP), redirect("http://127.0.0.2:1/snapshot.json")))
    (c, h, a), _ = _polled([closing, hop, away], 3)
    assert (c.polls, c.failures, h.polls, h.failures) == (3, 0, 3, 0)
    assert a.error == "redirect to another origin refused" and (a.polls, a.failures) == (3, 2)


def test_a_malformed_answer_on_the_kept_connection_is_refused(server):
    (node,), _ = _polled([server.add(_then(send(SNAP), raw(b"SSH-2.0-OpenSSH\r\n")))], 2)
    assert node.error == "bad response: not HTTP/1.x" and node.snapshot is not None


def test_closing_ends_a_request_in_the_loop(server):
    """A request the loop carries, from a node that trickles under a deadline of an hour, ends
    when the poller closes (close(wait=True) returns)."""
    node = NodeState(f"127.0.0.1:{server.add(_then(send(SNAP), _slowloris(0.2)))}")
    p = HttpPoller([node], 0, timeout=HOUR)
    p.poll_all()
    p.poll_all(wait=False)
    time.sleep(0.5)  # (the request is out: what it waits for is the answer)
    p.close(wait=True)
    assert not p._loop_thread.is_alive()
