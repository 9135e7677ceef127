"""`ctk ui` prints its links only once the server answers an HTTP request (a progress line
before); a store that does not exist is not created."""

from __future__ import annotations

import socket
import sys
import time
import urllib.request

import pytest

from toolkit.errors import CtkError
from toolkit.studies.ui_view import prepare
from toolkit.tracking import servers
from toolkit.tracking.store import client_for, experiment_id

SLOW_SERVER = """
import http.server, sys, time
time.sleep(float(sys.argv[2]))  # starting up, like mlflow's workers
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"OK")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health)
server.timeout = 0.1
end = time.time() + 2
while time.time() < end:
    server.handle_request()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_links_come_only_once_the_ui_answers(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = client_for(uri)
    rid = client.create_run(experiment_id(client, "demo"), tags={"ctk.domain": "toy"}).info.run_id
    client.set_terminated(rid, "FINISHED")
    port, delay = _free_port(), 1.5
    script = tmp_path / "slow.py"
    script.write_text(SLOW_SERVER)
    monkeypatch.setattr(servers, "mlflow_command", lambda *a, **k: [sys.executable, str(script), str(port), str(delay)])
    said: list[tuple[float, str, bool]] = []

    def echo(line: str) -> None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                answers = True
        except OSError:
            answers = False
        said.append((time.monotonic(), line, answers))

    start = time.monotonic()
    servers.ui(uri, "127.0.0.1", port, False, echo, echo, ready_timeout=30, views=prepare)
    link = [i for i, (_, line, _) in enumerate(said) if line.startswith("mlflow UI on http://")]
    assert link, said
    first = link[0]
    assert said[first][2], "the link was printed before the UI answered"
    assert said[first][0] - start >= delay
    assert any("starting" in line for _, line, _ in said[:first])  # a progress line while it starts
    assert any(f"http://127.0.0.1:{port}/#/experiments/" in line for _, line, _ in said[first:])


def test_ui_creates_no_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(CtkError, match="--uri URI or MLFLOW_TRACKING_URI"):
        servers.ui(None, "127.0.0.1", _free_port(), False, print, print)
    assert list(tmp_path.iterdir()) == []
