"""The tracking store's check before a run or a sweep starts: a refused address fails at once, a
server that took the connection but is slow (a loaded machine's mlflow server) is asked again
for a while, said in one line, and one that never answers is given up on after the patience."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from toolkit.tracking.health import TrackingUnavailable, check_store


def _server(delays: list[float]) -> ThreadingHTTPServer:
    """An HTTP server on loopback whose n-th request to /health waits delays[n] s (0 after)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            time.sleep(delays.pop(0) if delays else 0.0)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_slow_server_is_asked_again_and_used():
    server = _server([1.5])  # the first answer comes after the check's timeout
    said = []
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}"
        started = time.monotonic()
        check_store(uri, timeout=0.5, patience=10, say=said.append)
        assert time.monotonic() - started < 5
    finally:
        server.shutdown()
    assert len(said) == 1 and uri in said[0] and "asking again" in said[0], said


def test_a_server_that_never_answers_is_given_up_on_after_the_patience():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # takes connections (the kernel's backlog), never answers
    uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
    said = []
    try:
        started = time.monotonic()
        with pytest.raises(TrackingUnavailable, match="did not answer within") as err:
            check_store(uri, timeout=0.5, patience=2, say=said.append)
        took = time.monotonic() - started
    finally:
        listener.close()
    assert 1.5 <= took < 4, took
    assert uri in str(err.value) and "\n" not in str(err.value) and len(said) == 1


def test_a_refused_address_fails_at_once_without_waiting():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    said = []
    started = time.monotonic()
    with pytest.raises(TrackingUnavailable, match=f"127.0.0.1:{port}"):
        check_store(f"http://127.0.0.1:{port}", timeout=5, patience=60, say=said.append)
    assert time.monotonic() - started < 2 and not said
