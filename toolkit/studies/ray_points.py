"""Points on Ray: a local instance on loopback, or a cluster joined with one clear error when it
cannot be; each point a task that records where it ran; Ctrl-C that checkpoints and stops them.

* A local instance (``--jobs N``) binds and connects on 127.0.0.1 only: it needs no network, a
  laptop that changes networks keeps it, and nothing of it listens beyond this machine (Ray
  2.60 would otherwise take the machine's network address: ``_loopback``).
* ``--address HOST:PORT`` joins a cluster. An address that does not answer is reported within
  seconds, naming it; a cluster that refuses this process's token (Ray's token authentication:
  ``RAY_AUTH_MODE=token`` and the token, ``~/.ray/auth_token`` or ``$RAY_AUTH_TOKEN``) is one
  message with the fix; both exit with status 2 (:class:`LaunchError`). An address on loopback
  (a cluster on this machine) is joined from that address, not from the machine's own.
* Each point is a task (``max_retries=1``: a worker that dies, or its node, is retried once; the
  retry resumes the point from its checkpoint). The run records the node it ran on
  (``env.ray_node``: address/node id; ``env.ray_node_id``, ``env.ray_node_address``, and the GPUs
  Ray gave it, ``env.ray_gpus``) beside the machine it logs anyway (``env.gpu``...).
* Ctrl-C stops launching and cancels the running tasks: Ray's cancel raises the SIGINT that the
  trainer turns into "stop after this step"; the points end KILLED and a rerun resumes them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from toolkit.studies.point_run import LaunchError, Outcome, PointSpec, run_point

__all__ = ["start_ray", "ray_loop", "collect", "refuse_local_store", "ray_task", "JOIN_TIMEOUT_S", "STOP_WAIT_S"]

STOP_WAIT_S = 120.0
JOIN_TIMEOUT_S = 5.0
_AUTH_SIGNS = ("InvalidAuthToken", "Unauthenticated", "AuthenticationError", "authentication token")
AUTH_FIX = (
    "Ray at {address} refused this process: the cluster uses token authentication and this shell "
    "does not send its token. In every shell that starts a node or a sweep: export RAY_AUTH_MODE=token, "
    "with the head's token in ~/.ray/auth_token (or RAY_AUTH_TOKEN=<token>); make it once with "
    "`ray get-auth-token --generate` before `ray start --head` (docs/sweeps.md, From a laptop to a cluster)"
)


def ray_task(spec: PointSpec, lookup: Callable[[str], Any]) -> Outcome:
    """The body of a Ray task: this point's environment, working folder and thread budget; the
    run records the node and GPUs it got."""
    import ray
    import torch

    os.environ.update(spec.env)
    if spec.cwd and Path(spec.cwd).is_dir():
        os.chdir(spec.cwd)
    torch.set_num_threads(max(1, int(spec.cpus)))
    context = ray.get_runtime_context()
    return run_point(spec, lookup, task_id=context.get_task_id(), where=node_where(context))


def node_where(context: Any) -> dict[str, str]:
    """Where a task runs: its Ray node (id, address) and the GPUs Ray gave it (none: absent)."""
    import ray

    node_id, address = context.get_node_id(), ray.util.get_node_ip_address()
    where = {"ray_node": f"{address}/{node_id[:8]}", "ray_node_id": node_id, "ray_node_address": address}
    gpus = context.get_accelerator_ids().get("GPU") or []
    if gpus:
        where["ray_gpus"] = ",".join(str(g) for g in gpus)
    return where


def refuse_local_store(uri: str, hosts: list[str]) -> None:
    """Raise LaunchError when workers on other hosts would have to write a local file store."""
    local = uri.startswith(("sqlite:", "file:")) or "://" not in uri
    others = sorted({h for h in hosts if h != socket.gethostname()})
    if local and others:
        raise LaunchError(
            f"the tracking store {uri} is a file on this machine, but the Ray cluster has workers on "
            f"{', '.join(others[:3])}{' ...' if len(others) > 3 else ''} that cannot write it. Start a "
            "tracking server that every node reaches (ctk server --host 0.0.0.0 --port 5000 on this "
            "machine, or with --backend-store-uri postgresql://...) and run the sweep with "
            "MLFLOW_TRACKING_URI=http://THIS_HOST:5000"
        )


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise LaunchError(
            "--jobs > 1 and --address need Ray: pip install 'ctk[sweep]' (or pip install 'ray[default]==2.60.*')"
        ) from None
    return ray


def start_ray(jobs: int, address: str | None, cpus: float, env: dict[str, str]) -> tuple[Any, bool]:
    """(ray, whether we started a local instance): quiet, no dashboard; a local one on loopback,
    a cluster joined or a LaunchError that says why not."""
    ray = _import_ray()
    common = {
        "log_to_driver": False,
        "logging_level": "ERROR",
        "runtime_env": {"env_vars": env},
        "ignore_reinit_error": True,
    }
    with _held_sigint() as held:
        if address:
            join(ray, address, common)
        else:
            with _loopback(ray):
                ray.init(
                    num_cpus=max(os.cpu_count() or 1, int(jobs * cpus + 0.999)),
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    **common,
                )
    if held:  # Ctrl-C while Ray started: it is shut down in order (not torn half-way), then the sweep stops
        ray.shutdown()
        raise KeyboardInterrupt("interrupted while Ray started")
    return ray, not address


@contextlib.contextmanager
def _held_sigint() -> Iterator[list[int]]:
    """Ctrl-C (SIGINT) while the block runs is held (listed) instead of raised: an interrupt inside
    ray.init leaves its processes half-made and the driver may crash at exit (SIGSEGV)."""
    import signal
    import threading

    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _loopback(ray: Any) -> Iterator[None]:
    """While a local instance starts: Ray's own setting for a machine that is not a cluster, so
    that 127.0.0.1 stays 127.0.0.1 (Ray 2.60 replaces it by the machine's network address unless
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``); its processes inherit it as they start. Put back
    after, so that a ``ray start`` this process runs later can still join a cluster."""
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    before_env, before = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before
        if before_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before_env


def loopback_host(address: str) -> str | None:
    """The host of ``HOST:PORT`` when it is on loopback (a cluster on this machine), else None."""
    from toolkit.tracking.servers import is_loopback

    host = address.rsplit(":", 1)[0].strip("[]")
    return host if is_loopback(host) else None


def check_answers(address: str, timeout: float = JOIN_TIMEOUT_S) -> None:
    """A LaunchError within ``timeout`` seconds unless something listens at ``HOST:PORT``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise LaunchError(f"--address {address!r}: expected HOST:PORT (e.g. HEAD:6379) or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise LaunchError(
            f"Ray at {address} did not answer within {timeout:.0f} s ({reason}): start the head there "
            f"(ray start --head --port {port}) or give the head's address with --address / RAY_ADDRESS"
        ) from None


def join(ray: Any, address: str, common: dict[str, Any]) -> None:
    """ray.init on the cluster at ``address``; Ray's own output of a failed attempt (a page of C++
    warnings and tracebacks) is kept off the terminal and read for the cause."""
    if address != "auto":
        check_answers(address)
    host = loopback_host(address) if address != "auto" else None
    with tempfile.TemporaryFile(mode="w+") as caught:
        try:
            with _stderr_to(caught):
                if address != "auto":
                    _ask_gcs(address)
                ray.init(address=address, **({"_node_ip_address": host} if host else {}), **common)
        except Exception as exc:  # noqa: BLE001 - every way of failing to join is one message
            caught.seek(0)
            said = caught.read()
            chain = " ".join(f"{type(e).__name__}: {e}" for e in _causes(exc))
            if any(sign in said or sign in chain for sign in _AUTH_SIGNS):
                raise LaunchError(AUTH_FIX.format(address=address)) from None
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise LaunchError(f"could not join the Ray cluster at {address}: {first[:300]}") from None


def _ask_gcs(address: str) -> None:
    """One call to the head's GCS before ``ray.init``: a cluster that refuses this process's token
    says so at once here, where ``ray.init`` retries for 20 s before it gives up (Ray 2.60). Any
    other outcome is left to ``ray.init`` (and a Ray without this client skips the question)."""
    try:
        from ray._raylet import GcsClient
    except ImportError:
        return
    try:
        GcsClient(address=address)
    except Exception as exc:  # noqa: BLE001 - only a refused token is acted on here
        if any(sign in f"{type(exc).__name__}: {exc}" for sign in _AUTH_SIGNS):
            raise
        return


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


@contextlib.contextmanager
def _stderr_to(file: Any) -> Iterator[None]:
    """File descriptor 2 (C++ logs included) into ``file`` while the block runs."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(file.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def ray_loop(
    ray: Any, specs: list[PointSpec], lookup: Any, limit: int, echo: Callable[[str], None]
) -> tuple[list[Outcome], bool]:
    """At most ``limit`` points at once until all are done; Ctrl-C cancels the running ones
    (they checkpoint and end KILLED) and waits up to STOP_WAIT_S for them."""
    task = ray.remote(max_retries=1, retry_exceptions=False)(ray_task)
    pending, running, outcomes = list(specs), {}, []
    try:
        while pending or running:
            while pending and len(running) < limit:
                spec = pending.pop(0)
                echo(f"-> {spec.label}")
                ref = task.options(num_cpus=spec.cpus, num_gpus=spec.gpus, name=spec.label).remote(spec, lookup)
                running[ref] = spec
            done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for ref in done:
                outcomes.append(collect(ray, ref, running.pop(ref)))
                echo(f"<- {outcomes[-1].label}: {outcomes[-1].outcome}")
        return outcomes, False
    except KeyboardInterrupt:
        echo(f"interrupted: launching nothing more; asking {len(running)} running point(s) to checkpoint and stop")
        for ref in running:
            ray.cancel(ref)
        deadline = time.monotonic() + STOP_WAIT_S
        while running and time.monotonic() < deadline:
            done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for ref in done:
                outcomes.append(collect(ray, ref, running.pop(ref)))
        outcomes += [Outcome(s.label, "killed", note="did not stop in time") for s in running.values()]
        return outcomes, True


def collect(ray: Any, ref: Any, spec: PointSpec) -> Outcome:
    """The outcome of a finished task (a cancelled one: killed; a lost one: failed)."""
    from ray.exceptions import RayError, TaskCancelledError

    try:
        return ray.get(ref)
    except TaskCancelledError:
        return Outcome(spec.label, "killed", note="stopped (Ctrl-C); resumed by the next run of the sweep")
    except RayError as exc:  # the worker died twice, or its node went away
        first = (str(exc).strip().splitlines() or [""])[0]
        return Outcome(spec.label, "failed", note=f"{type(exc).__name__}: {first}"[:200])
