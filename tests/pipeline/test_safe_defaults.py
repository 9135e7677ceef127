"""Safe by default: ``ctk ui`` listens on loopback only and warns once when asked for more;
recipes are data (python YAML tags and module paths are refused with exit 2, one line per
problem, no traceback)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli
from tests.conftest import process_tree

ROOT = Path(cli.__file__).resolve().parent


def _listening(port: int) -> set[str]:
    """Local addresses with a LISTEN socket on ``port``, read from /proc/net/tcp{,6}."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A = TCP_LISTEN
                continue
            raw = bytes.fromhex(address)
            # the kernel prints each 32-bit word in host (little-endian) order
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(socket.inet_ntop(socket.AF_INET if width == 8 else socket.AF_INET6, words))
    return found


def _below(pid: int) -> list[str]:
    """The command lines of the processes started, directly or not, by ``pid``."""
    found = []
    for q in process_tree(pid)[1:]:
        try:
            found.append(Path(f"/proc/{q}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's socket table")
@pytest.mark.slow
def test_ctk_ui_listens_on_loopback_only(tmp_path):
    from toolkit.tracking.store import client_for

    client_for(f"sqlite:///{tmp_path / 'mlflow.db'}")  # ctk ui reads a store, never creates one
    port = _free_port()
    command = [
        sys.executable,
        str(ROOT / "cli.py"),
        "ui",
        "--port",
        str(port),
        "--uri",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    env = {**os.environ, "MLFLOW_TRACKING_URI": ""}
    server = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline, bound = time.monotonic() + 120, set()
        while time.monotonic() < deadline and not bound and server.poll() is None:
            time.sleep(0.5)
            bound = _listening(port)
        assert bound == {"127.0.0.1"}, (bound, server.poll())
        # one web worker and no mlflow job runner (seven processes ctk has no use for)
        started = _below(server.pid)
        assert not [c for c in started if "huey" in c], started
        assert any("mlflow ui" in c and "--workers 1 " in c + " " for c in started), started
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the group this test started
        try:
            output = server.communicate(timeout=30)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            output = server.communicate()[0].decode(errors="replace")
    assert "warning: listening" not in output and f"http://127.0.0.1:{port}" in output


def _ui(monkeypatch, *args: str):
    from toolkit.tracking import servers

    started = []
    monkeypatch.setattr(servers, "supervise", lambda cmd, *a, **k: started.append(cmd) or 0)
    result = CliRunner().invoke(cli.main, ["ui", *args])
    return result, started


def test_ui_on_all_interfaces_warns_once_and_passes_basic_auth(monkeypatch, tmp_path):
    from toolkit.tracking.store import client_for

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///x.db")  # ctk ui reads a store, never creates one
    client_for("sqlite:///x.db")
    result, started = _ui(monkeypatch, "--uri", "sqlite:///x.db")
    assert result.exit_code == 0 and "warning" not in result.output
    argv = started[0]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and "--app-name" not in argv

    result, started = _ui(monkeypatch, "--uri", "sqlite:///x.db", "--host", "0.0.0.0")
    assert result.exit_code == 0 and result.output.count("warning") == 1
    assert "anyone who reaches the port can read and change every run" in result.output
    assert "--basic-auth" in result.output and "--app-name basic-auth" in result.output

    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())  # mlflow[auth] present
    result, started = _ui(monkeypatch, "--uri", "sqlite:///x.db", "--host", "0.0.0.0", "--basic-auth")
    assert result.exit_code == 0 and result.output.count("warning") == 1
    argv = started[0]
    assert argv[argv.index("--app-name") + 1] == "basic-auth"


def test_basic_auth_without_mlflow_auth_extra_is_refused_before_starting(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    result, started = _ui(monkeypatch, "--basic-auth")
    assert result.exit_code == 2 and "pip install 'mlflow[auth]'" in result.output
    assert started == []


def test_web_workers_one_for_the_ui_one_a_core_for_the_server(monkeypatch, tmp_path):
    from toolkit.tracking import servers
    from toolkit.tracking.store import client_for

    store = f"sqlite:///{tmp_path / 'x.db'}"
    client_for(store)

    def workers(argv: list[str]) -> int:
        return int(argv[argv.index("--workers") + 1])

    result, started = _ui(monkeypatch, "--uri", store)
    assert result.exit_code == 0 and workers(started[0]) == 1, result.output
    assert workers(_ui(monkeypatch, "--uri", store, "--workers", "3")[1][0]) == 3
    result, started = _ui(monkeypatch, "--uri", store, "--workers", "0")
    assert result.exit_code == 2 and "--workers" in result.output and started == []

    served = []
    monkeypatch.setattr(servers, "supervise", lambda cmd, *a, **k: served.append(cmd) or 0)
    for cores, expected in ((1, 1), (2, 2), (16, 4), (None, 1)):
        monkeypatch.setattr(servers.os, "cpu_count", lambda cores=cores: cores)
        assert CliRunner().invoke(cli.main, ["server", "--backend-store-uri", store]).exit_code == 0
        assert workers(served[-1]) == expected, cores
    CliRunner().invoke(cli.main, ["server", "--backend-store-uri", store, "--workers", "6"])
    assert workers(served[-1]) == 6


def test_the_servers_start_without_mlflow_s_job_runner_unless_asked(monkeypatch):
    from toolkit.tracking import servers

    seen = []

    class Ended:
        def __init__(self, cmd, env=None, **kwargs):
            seen.append(env)
            self.pid, self.returncode = 0, 0

        def poll(self):
            return 0

    monkeypatch.setattr(servers.subprocess, "Popen", Ended)
    monkeypatch.delenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", raising=False)
    servers.supervise(["mlflow"], "127.0.0.1", 1, lambda: None, lambda line: None, 1.0)
    assert seen[-1]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    monkeypatch.setenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "true")  # a user who wants mlflow's jobs
    servers.supervise(["mlflow"], "127.0.0.1", 1, lambda: None, lambda line: None, 1.0)
    assert seen[-1]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "true"


@pytest.mark.parametrize(
    "address,local",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.org", False),
    ],
)
def test_loopback_addresses(address, local):
    from toolkit.tracking.servers import is_loopback

    assert is_loopback(address) is local


EVIL = {
    "object": "domain: toy\nobjective: !!python/object:collections.OrderedDict {}\n",
    "name": "domain: !!python/name:os.system\n",
    "apply": "domain: toy\nseed: !!python/object/apply:os.system ['touch PWNED']\n",
}


@pytest.mark.parametrize("command", ["show", "run"])
@pytest.mark.parametrize("kind", sorted(EVIL))
def test_python_yaml_tags_are_refused(tmp_path, monkeypatch, command, kind):
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "evil.yaml"
    recipe.write_text(EVIL[kind])
    result = CliRunner().invoke(cli.main, [command, str(recipe)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert lines[0] == f"error: {recipe}: 1 problem:"
    assert len(lines) == 2 and "!!python/" in lines[1] and "is refused" in lines[1]
    assert not (tmp_path / "PWNED").exists()


def test_a_module_path_is_not_a_domain(tmp_path):
    recipe = tmp_path / "path.yaml"
    recipe.write_text("domain: 'os:system'\n")
    result = CliRunner().invoke(cli.main, ["show", str(recipe)])
    assert result.exit_code == 2
    assert "domain: unknown domain 'os:system'; expected one of:" in result.output
