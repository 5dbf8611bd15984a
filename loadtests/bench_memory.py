"""Memory of the embedded default (``configs/local.yaml``) per process group: idle, under load, soak.

Issue 18, item 4 ("Memory"): the whole embedded default should stay within 4 GiB above the idle
machine. What this measures, in order:

1. The idle machine: used memory = ``MemTotal - MemAvailable`` (``/proc/meminfo``), sampled a few
   times before anything of ours runs (this process, with httpx imported, is already running, so
   the load client's own memory is part of the baseline).
2. Starts the gateway exactly as users do, ``horizon serve configs/local.yaml --non-blocking`` (it
   starts Ray, deploys and returns), and waits until ``GET /health`` says ``"status": "ready"``.
   ``horizon stop`` stops it at the end, whatever happens.
3. Idle (ready + 20 s settle): proportional memory per process group, PSS from
   ``/proc/<pid>/smaps_rollup`` summed per group (shared pages are split among the processes that
   map them, so groups add up; summed RSS would count the shared Python/torch libraries once per
   process), and USS (``Private_Clean + Private_Dirty``). Only processes of the Ray session that
   ``horizon serve`` started are counted (Ray processes naming its session directory or GCS
   address on their command line, and their descendants); the rest of the machine is reported as
   ``outside`` PSS.
   Groups, by each process's command line (and the process tree for the model replicas):
   ``ray-core`` (gcs_server, raylet, dashboard*, log_monitor, monitor, the runtime-env and
   dashboard agents, ray client server), ``serve-control`` (ServeController, ProxyActor,
   HAProxyManager), ``ingress`` (the ``ingress`` ServeReplica), ``vllm-k2`` (the ``model-k2``
   ServeReplica and every descendant: vLLM's EngineCore and workers; also Ray-scheduled vLLM
   workers), ``embedder`` (the ServeReplica of the embedding deployment, ``model-bge-m3``, and its
   descendants), ``haproxy``, ``idle-ray-workers`` (``ray::IDLE``, and workers still starting),
   ``other-ray`` (any other ``ray::`` process: the gateway's ApplicationState actor (the breaker
   registry and the demand board; two actors, BreakerRegistry and GatewayDemandBoard, before
   stop 55), other replicas),
   ``horizon-cli`` (the ``horizon serve`` driver while alive) and ``other`` (anything else of the
   session). The rise over idle is used memory now minus the baseline; as the machine may be
   shared, the rise is also given less the growth of every other process's PSS since the
   baseline (``adjusted``), with the largest other processes in each sample.
   Then CPU while idle (``--idle-cpu-seconds``, default 60): each process's user + system time
   (``/proc/<pid>/stat``) at the start and the end of the window, in percent of one core per group
   and per process (a laptop runs this beside a browser: what an idle gateway keeps busy matters
   as much as what it holds). Processes present at both ends count; the whole machine's busy time
   over the same window (``/proc/stat``) is given beside it, in percent of one core too.
4. Load (``--load-seconds``, default 60): 8 concurrent clients posting ``/v1/chat/completions``
   (``model: auto``, "Write a haiku about the sea.", ``max_tokens: 32``) plus one client posting
   ``/v1/embeddings`` (``model: bge-m3``); memory sampled every 10 s, the max per group reported.
5. Soak (``--soak-seconds``, default 600): 2 concurrent chat clients (and one embeddings call a
   second); total PSS and used memory sampled every 15 s, least-squares slope in MiB/minute over
   the whole soak and per window of ``--window-seconds`` (default 600), so a longer soak shows
   whether growth levels off. ``--soak-chat-clients 0 --soak-embed-rate 0`` soaks with no
   requests at all: growth then comes with time (health checks, metrics, the autoscaler's
   polls), not with requests.

Prints markdown tables; writes ``loadtests/results/memory.json`` (machine, command, every figure,
per-group tables and all samples). Needs no other Ray cluster on the machine (``horizon serve``
refuses to start next to one) and port 8000 free.

  .venv/bin/python loadtests/bench_memory.py [--soak-seconds 600] [--load-seconds 60] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import httpx

ROOT = Path(__file__).resolve().parents[1]
HORIZON = str(ROOT / ".venv" / "bin" / "horizon")
CONFIG = "configs/local.yaml"
BASE_URL = "http://127.0.0.1:8000"
CHAT_BODY = {"model": "auto", "messages": [{"role": "user", "content": "Write a haiku about the sea."}],
             "max_tokens": 32}
EMBED_BODY = {"model": "bge-m3", "input": ["hello world"]}
EMBED_MARKERS = ("embed", "bge", "minilm")

GROUPS = ["ray-core", "serve-control", "ingress", "vllm-k2", "embedder", "haproxy",
          "idle-ray-workers", "other-ray", "horizon-cli", "other"]
# Groups whose descendants (forked engine processes, resource trackers) count with them.
TREE_GROUPS = ("vllm-k2", "embedder", "ingress")
MIB = 1024.0


# ---------------------------------------------------------------- /proc

def meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0])  # kB
    return out


def used_mib() -> float:
    m = meminfo()
    return (m["MemTotal"] - m["MemAvailable"]) / MIB


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # vanished, or a kernel thread
        return None


def processes() -> dict[int, dict[str, Any]]:
    """Every user-space process: pid → {ppid, cmd, cpu_ticks (user + system time so far, in clock
    ticks)}. Processes vanishing meanwhile are skipped."""
    procs = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        raw = _read(f"/proc/{pid}/cmdline")
        stat = _read(f"/proc/{pid}/stat")
        if not raw or not stat:
            continue
        try:
            fields = stat[stat.rindex(b")") + 2:].split()
            ppid, ticks = int(fields[1]), int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except (ValueError, IndexError):
            continue
        procs[pid] = {"ppid": ppid, "cmd": raw.replace(b"\0", b" ").decode("utf-8", "replace").strip(),
                      "cpu_ticks": ticks}
    return procs


def smaps(pid: int) -> Optional[tuple[float, float]]:
    """(PSS, USS) in MiB, or None when the process is gone."""
    raw = _read(f"/proc/{pid}/smaps_rollup")
    if raw is None:
        return None
    vals = {}
    for line in raw.decode().splitlines()[1:]:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            vals[key] = int(parts[0])
    if "Pss" not in vals:
        return None
    return vals["Pss"] / MIB, (vals.get("Private_Clean", 0) + vals.get("Private_Dirty", 0)) / MIB


def own_group(cmd: str) -> Optional[str]:
    """The group a process belongs to by its own command line (None: decided by its ancestors)."""
    first = cmd.split(" ", 1)[0]
    exe = os.path.basename(first)
    if exe in ("gcs_server", "raylet") or any(s in cmd for s in (
            "ray/dashboard/", "log_monitor.py", "autoscaler/_private/monitor.py", "ray_client_server",
            "ray.util.client.server", "runtime_env/agent", "dashboard/agent.py")) \
            or first in ("ray::DashboardAgent", "ray::RuntimeEnvAgent"):
        return "ray-core"
    if "haproxy" in exe:
        return "haproxy"
    if first.startswith("ray::ServeController") or first.startswith("ray::ProxyActor") \
            or first.startswith("ray::HAProxyManager"):
        return "serve-control"
    if first.startswith("ray::ServeReplica:"):
        # ray::ServeReplica:<app>:<deployment>[.<method being run>]
        rest = first[len("ray::ServeReplica:"):]
        deployment = rest.split(":", 1)[-1].split(".")[0]
        if deployment == "ingress" or "Ingress" in deployment:
            return "ingress"
        if deployment == "model-k2":
            return "vllm-k2"
        if any(m in deployment.lower() for m in EMBED_MARKERS):
            return "embedder"
        return "other-ray"
    if first.startswith("ray::RayWorkerWrapper") or "EngineCore" in first or first.startswith("VLLM"):
        return "vllm-k2"
    if first.startswith("ray::IDLE") or "default_worker.py" in cmd:  # a worker still starting
        return "idle-ray-workers"
    if first.startswith("ray::"):
        return "other-ray"
    if "horizon serve" in cmd or ("bin/horizon" in cmd and " serve" in cmd):
        return "horizon-cli"
    return None


def classify(procs: dict[int, dict[str, Any]], markers: tuple[str, ...]) -> dict[int, str]:
    """pid → group for the processes of our Ray session (and the ``horizon serve`` driver).

    The roots are Ray processes naming our session directory or GCS address on their command
    line (gcs_server, raylet, monitors, the client server); every descendant of a root is ours.
    A process that only mentions the session (someone's shell, a test) is not."""
    roots = {pid for pid, p in procs.items()
             if own_group(p["cmd"]) is not None and any(m and m in p["cmd"] for m in markers)}
    roots |= {pid for pid, p in procs.items() if own_group(p["cmd"]) == "horizon-cli"}
    ours: dict[int, str] = {}
    for pid, p in procs.items():
        if pid == os.getpid():
            continue
        chain, cur, seen = [], pid, set()
        while cur in procs and cur not in seen:
            seen.add(cur)
            chain.append(cur)
            cur = procs[cur]["ppid"]
        if not any(c in roots for c in chain):
            continue
        group = own_group(p["cmd"])
        # The nearest replica ancestor claims forked engine processes (not HAProxy: its own group).
        if group not in ("haproxy",):
            for anc in chain[1:]:
                anc_group = own_group(procs[anc]["cmd"])
                if anc_group in TREE_GROUPS:
                    group = anc_group
                    break
        ours[pid] = group or "other"
    return ours


def sample(markers: tuple[str, ...]) -> dict[str, Any]:
    """One measurement: per group processes / PSS / USS, totals, used memory and outside PSS."""
    procs = processes()
    ours = classify(procs, markers)
    groups = {g: {"processes": 0, "pss_mib": 0.0, "uss_mib": 0.0, "members": []} for g in GROUPS}
    outside = 0.0
    outside_top: list[dict[str, Any]] = []
    me = os.getpid()
    for pid, p in procs.items():
        m = smaps(pid)
        if m is None:
            continue
        if pid in ours:
            g = groups[ours[pid]]
            g["processes"] += 1
            g["pss_mib"] += m[0]
            g["uss_mib"] += m[1]
            g["members"].append({"pid": pid, "cmd": p["cmd"][:100], "pss_mib": round(m[0], 1)})
        elif pid != me:
            outside += m[0]
            outside_top.append({"pid": pid, "cmd": p["cmd"][:100], "pss_mib": round(m[0], 1)})
    for g in groups.values():
        g["pss_mib"] = round(g["pss_mib"], 1)
        g["uss_mib"] = round(g["uss_mib"], 1)
    mi = meminfo()
    return {"t": time.time(), "groups": groups,
            "total_pss_mib": round(sum(g["pss_mib"] for g in groups.values()), 1),
            "total_uss_mib": round(sum(g["uss_mib"] for g in groups.values()), 1),
            "used_mib": round((mi["MemTotal"] - mi["MemAvailable"]) / MIB, 1),
            "shmem_mib": round(mi.get("Shmem", 0) / MIB, 1),
            "bench_pss_mib": round((smaps(me) or (0.0, 0.0))[0], 1),
            "outside_pss_mib": round(outside, 1),
            "outside_top": sorted(outside_top, key=lambda x: -x["pss_mib"])[:5]}


def machine_busy_ticks() -> int:
    """Ticks every CPU of the machine spent busy so far (``/proc/stat``: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)


def cpu_by_group(before: Mapping[int, int], after: Mapping[int, int], groups_of: Mapping[int, str],
                 names: Mapping[int, str], seconds: float, hz: float) -> dict[str, Any]:
    """Percent of one core per group and per process between two snapshots of CPU ticks per pid
    ``seconds`` apart; a process counts when it is in both and in ``groups_of``."""
    groups = {g: 0.0 for g in GROUPS}
    per_process = []
    for pid, group in groups_of.items():
        if pid not in before or pid not in after:
            continue
        share = 100.0 * (after[pid] - before[pid]) / hz / seconds
        groups[group] += share
        per_process.append({"pid": pid, "group": group, "cmd": names.get(pid, "")[:100],
                            "cpu_pct_of_core": round(share, 2)})
    per_process.sort(key=lambda r: -r["cpu_pct_of_core"])
    return {"groups": {g: round(v, 2) for g, v in groups.items()},
            "total_pct_of_core": round(sum(groups.values()), 2),
            "top_processes": [r for r in per_process if r["cpu_pct_of_core"] > 0][:12]}


def idle_cpu(markers: tuple[str, ...], seconds: float) -> dict[str, Any]:
    """CPU per group of our session over ``seconds`` of no requests, and the machine's."""
    hz = float(os.sysconf("SC_CLK_TCK"))
    procs, busy0, t0 = processes(), machine_busy_ticks(), time.monotonic()
    time.sleep(seconds)
    after, busy1, elapsed = processes(), machine_busy_ticks(), time.monotonic() - t0
    out = cpu_by_group({pid: p["cpu_ticks"] for pid, p in procs.items()},
                       {pid: p["cpu_ticks"] for pid, p in after.items()}, classify(procs, markers),
                       {pid: p["cmd"] for pid, p in procs.items()}, elapsed, hz)
    out["seconds"] = round(elapsed, 1)
    out["machine_busy_pct_of_core"] = round(100.0 * (busy1 - busy0) / hz / elapsed, 2)
    return out


def print_cpu_table(cpu: dict[str, Any]) -> None:
    print(f"\n### CPU while idle ({cpu['seconds']:.0f} s, percent of one core)\n")
    print("| group | CPU % of one core |")
    print("|---|---:|")
    for g in GROUPS:
        print(f"| {g} | {cpu['groups'][g]:.2f} |")
    print(f"| **total** | **{cpu['total_pct_of_core']:.2f}** |")
    print(f"\nthe whole machine over the same window: {cpu['machine_busy_pct_of_core']:.2f} % of one core "
          f"({os.cpu_count()} CPUs); busiest processes: " + ", ".join(
              f"{r['cmd'].split(' ', 1)[0][:48]} {r['cpu_pct_of_core']:.2f}" for r in cpu["top_processes"][:8]))


# ---------------------------------------------------------------- the gateway

def wait_ready(timeout_s: float, proc: subprocess.Popen) -> float:
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout_s:
        try:
            body = httpx.get(f"{BASE_URL}/health", timeout=5).json()
            status = body.get("status", "")
            if status != last:
                print(f"bench: /health status {status!r} at {time.monotonic() - start:.0f} s", flush=True)
                last = status
            if status == "ready":
                return time.monotonic() - start
        except (httpx.HTTPError, ValueError):
            pass
        if proc.poll() not in (None, 0):
            raise RuntimeError(f"horizon serve exited with {proc.returncode} before ready")
        time.sleep(2)
    raise RuntimeError(f"/health not ready after {timeout_s:.0f} s")


def session_markers() -> tuple[str, ...]:
    """What names our Ray cluster on its processes' command lines: the session directory and the
    GCS address (``ray start`` starts the client server with ``--address=<gcs>`` only), from the
    state file ``horizon serve`` writes."""
    state = Path(os.environ.get("HORIZON_STATE_DIR") or Path.home() / ".cache" / "k2-horizon" / "run") / "serve.json"
    try:
        st = json.loads(state.read_text())
    except (OSError, ValueError):
        return ()
    session, gcs = st.get("session_dir", ""), st.get("gcs_address", "")
    return tuple(m for m in (session, f"--address={gcs}" if gcs else "") if m)


def _pump(stream, prefix: str) -> None:
    for line in iter(stream.readline, ""):
        print(f"{prefix}{line.rstrip()}", flush=True)


# ---------------------------------------------------------------- load

class Stats:
    def __init__(self) -> None:
        self.ok: dict[str, int] = {"chat": 0, "embed": 0}
        self.err: dict[str, int] = {"chat": 0, "embed": 0}
        self.lat: dict[str, list[float]] = {"chat": [], "embed": []}
        self.errors: list[str] = []

    def summary(self) -> dict[str, Any]:
        out = {}
        for k in ("chat", "embed"):
            lat = sorted(self.lat[k])
            out[k] = {"ok": self.ok[k], "errors": self.err[k],
                      "p50_s": round(lat[len(lat) // 2], 3) if lat else None,
                      "max_s": round(lat[-1], 3) if lat else None}
        out["first_errors"] = self.errors[:5]
        return out


async def _client(client: httpx.AsyncClient, kind: str, stop: float, stats: Stats, pause_s: float = 0.0) -> None:
    path, body = ("/v1/chat/completions", CHAT_BODY) if kind == "chat" else ("/v1/embeddings", EMBED_BODY)
    while time.monotonic() < stop:
        t0 = time.monotonic()
        try:
            r = await client.post(f"{BASE_URL}{path}", json=body, timeout=300)
            if r.status_code == 200:
                stats.ok[kind] += 1
                stats.lat[kind].append(time.monotonic() - t0)
            else:
                stats.err[kind] += 1
                stats.errors.append(f"{kind} {r.status_code}: {r.text[:200]}")
        except httpx.HTTPError as exc:
            stats.err[kind] += 1
            stats.errors.append(f"{kind} {type(exc).__name__}: {exc}")
        if pause_s:
            await asyncio.sleep(pause_s)


async def run_load(seconds: float, chat_clients: int, embed_pause_s: Optional[float], every_s: float,
                   session: tuple[str, ...]) -> tuple[Stats, list[dict[str, Any]]]:
    """Load for ``seconds``; samples memory every ``every_s`` (in a thread: /proc reads block).
    ``embed_pause_s`` None: no embeddings client (no clients at all: an idle soak)."""
    stats, samples = Stats(), []
    stop = time.monotonic() + seconds
    start = time.monotonic()

    async def sampler() -> None:
        while True:
            s = await asyncio.to_thread(sample, session)
            s["elapsed_s"] = round(time.monotonic() - start, 1)
            samples.append(s)
            print(f"bench:   {s['elapsed_s']:6.0f} s  total PSS {s['total_pss_mib']:8.1f} MiB  used "
                  f"{s['used_mib']:8.1f} MiB  ok chat {stats.ok['chat']} embed {stats.ok['embed']}  "
                  f"errors {sum(stats.err.values())}", flush=True)
            if time.monotonic() + every_s > stop + 1:
                return
            await asyncio.sleep(every_s)

    limits = httpx.Limits(max_connections=chat_clients + 4)
    async with httpx.AsyncClient(limits=limits) as client:
        tasks = [asyncio.create_task(_client(client, "chat", stop, stats)) for _ in range(chat_clients)]
        if embed_pause_s is not None:
            tasks.append(asyncio.create_task(_client(client, "embed", stop, stats, embed_pause_s)))
        sampler_task = asyncio.create_task(sampler())
        await asyncio.gather(*tasks)
        await sampler_task
    # One more sample after the last requests finished.
    s = sample(session)
    s["elapsed_s"] = round(time.monotonic() - start, 1)
    samples.append(s)
    return stats, samples


def slope_per_min(points: list[tuple[float, float]]) -> Optional[float]:
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx * 60.0


def window_slopes(samples: list[dict[str, Any]], window_s: float) -> list[dict[str, Any]]:
    """The soak cut into consecutive windows of ``window_s`` (the last one may be shorter, and is
    left out when it holds under half a window): the slope of total PSS, of each group and of
    each process alive through the window, per window.

    One slope over the whole soak cannot tell a process that fills its caches and then levels
    off from one that keeps growing; the last window's slope can."""
    if not samples or window_s <= 0:
        return []
    end = samples[-1]["elapsed_s"]
    out, start = [], 0.0
    while start < end:
        stop = start + window_s
        inside = [s for s in samples if start <= s["elapsed_s"] <= stop]
        if len(inside) >= 2 and inside[-1]["elapsed_s"] - inside[0]["elapsed_s"] >= window_s / 2:
            total = slope_per_min([(s["elapsed_s"], s["total_pss_mib"]) for s in inside])
            groups = {g: slope_per_min([(s["elapsed_s"], s["groups"][g]["pss_mib"]) for s in inside])
                      for g in GROUPS}
            series: dict[str, list[tuple[float, float]]] = {}
            for s in inside:
                for g in s["groups"].values():
                    for pid, pss in (g.get("pss_by_pid") or {}).items():
                        series.setdefault(pid, []).append((s["elapsed_s"], pss))
            per_process = {pid: slope_per_min(pts) for pid, pts in series.items() if len(pts) == len(inside)}
            out.append({"start_s": inside[0]["elapsed_s"], "end_s": inside[-1]["elapsed_s"],
                        "samples": len(inside),
                        "pss_slope_mib_per_min": None if total is None else round(total, 2),
                        "group_pss_slope_mib_per_min": {g: round(v, 2) for g, v in groups.items()
                                                        if v is not None},
                        # Processes alive through the whole window whose PSS moved ≥ 0.05 MiB/min.
                        "process_pss_slope_mib_per_min": {pid: round(v, 2) for pid, v in per_process.items()
                                                          if v is not None and abs(v) >= 0.05}})
        start = stop
    return out


# ---------------------------------------------------------------- report

def group_table(s: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"group": g, "processes": s["groups"][g]["processes"], "pss_mib": s["groups"][g]["pss_mib"],
             "uss_mib": s["groups"][g]["uss_mib"]} for g in GROUPS]


def max_table(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"group": g, "processes": max(s["groups"][g]["processes"] for s in samples),
             "pss_mib": max(s["groups"][g]["pss_mib"] for s in samples),
             "uss_mib": max(s["groups"][g]["uss_mib"] for s in samples)} for g in GROUPS]


def print_table(title: str, rows: list[dict[str, Any]], total_pss: float, rise: float, rise_adj: float) -> None:
    print(f"\n### {title}\n")
    print("| group | processes | PSS MiB | USS MiB |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['group']} | {r['processes']} | {r['pss_mib']:.1f} | {r['uss_mib']:.1f} |")
    print(f"| **total** | {sum(r['processes'] for r in rows)} | **{total_pss:.1f}** | "
          f"{sum(r['uss_mib'] for r in rows):.1f} |")
    print(f"\nUsed memory above the idle machine: **{rise:.1f} MiB** ({rise / 1024:.2f} GiB; target ≤ 4 GiB); "
          f"less the growth of other processes' PSS: {rise_adj:.1f} MiB")


def code_state() -> dict[str, Any]:
    """The commit measured, and tracked files edited in the working tree when the run started."""
    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.rstrip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"commit": git("rev-parse", "HEAD").strip(),
            "modified_tracked_files": git("status", "--porcelain", "--untracked-files=no").splitlines()}


def machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {"cpus": os.cpu_count(), "cpu": cpu, "mem_total_mib": round(meminfo()["MemTotal"] / MIB, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def strip_members(s: dict[str, Any]) -> dict[str, Any]:
    """A sample without per-process lists (kept only for the idle and peak samples)."""
    return {**s, "groups": {g: {k: v for k, v in d.items() if k != "members"} for g, d in s["groups"].items()}}


def compact_members(s: dict[str, Any]) -> dict[str, Any]:
    """A sample with each group's processes as ``pss_by_pid`` ({pid: PSS MiB}); their commands
    are kept once per phase (:func:`process_names`). The soak keeps them so that a group's
    growth can be traced to one process."""
    return {**s, "groups": {g: {**{k: v for k, v in d.items() if k != "members"},
                                "pss_by_pid": {str(m["pid"]): m["pss_mib"] for m in d.get("members", [])}}
                            for g, d in s["groups"].items()}}


def process_names(samples: list[dict[str, Any]]) -> dict[str, str]:
    return {str(m["pid"]): m["cmd"] for s in samples for d in s["groups"].values() for m in d.get("members", [])}


def cluster_env(base: Mapping[str, str], pairs: list[str]) -> dict[str, str]:
    """The environment ``horizon serve`` (and so every process of its cluster) starts with:
    ``base`` with each ``KEY=VALUE`` of ``--env`` set over it."""
    env = dict(base)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env wants KEY=VALUE, not {pair!r}")
        env[key] = value
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--soak-seconds", type=float, default=600.0)
    ap.add_argument("--load-seconds", type=float, default=60.0)
    ap.add_argument("--settle-seconds", type=float, default=20.0)
    ap.add_argument("--idle-cpu-seconds", type=float, default=60.0,
                    help="window over which the idle gateway's CPU is measured, per group (0: not measured)")
    ap.add_argument("--soak-chat-clients", type=int, default=2,
                    help="closed-loop chat clients during the soak (0 with --soak-embed-rate 0: an idle soak, "
                         "which tells growth with time from growth with requests)")
    ap.add_argument("--soak-embed-rate", type=float, default=1.0,
                    help="embedding calls per second during the soak (0: none)")
    ap.add_argument("--window-seconds", type=float, default=600.0,
                    help="the soak's slopes are also given per window of this length")
    ap.add_argument("--ready-timeout", type=float, default=600.0)
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="set for `horizon serve` and so for every process of its cluster (e.g. glibc's "
                         "MALLOC_ARENA_MAX, read when a process starts); repeatable, recorded in the JSON")
    ap.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "memory.json"))
    args = ap.parse_args()
    try:
        serve_env = cluster_env(os.environ, args.env)
    except ValueError as exc:
        ap.error(str(exc))
    command = ".venv/bin/python loadtests/bench_memory.py " + " ".join(sys.argv[1:])
    serve_cmd = [HORIZON, "serve", CONFIG, "--non-blocking"]
    doc: dict[str, Any] = {"issue": "18 (item 4: memory)", "machine": machine(), "command": command.strip(),
                           "serve_command": ".venv/bin/horizon serve configs/local.yaml --non-blocking",
                           "config": CONFIG, "env": args.env, "code": code_state(), "target": "whole embedded default ≤ 4 GiB above the idle machine",
                           "method": "PSS/USS from /proc/<pid>/smaps_rollup summed per group; used memory = "
                                     "MemTotal - MemAvailable; rise = used now - idle baseline"}

    # 1. The idle machine (and what other processes on it hold: the machine may be shared, so
    # every later sample also reports the rise corrected by the change of everyone else's PSS).
    base, base_out = [], []
    for _ in range(5):
        b = sample(())
        base.append(b["used_mib"])
        base_out.append(b["outside_pss_mib"])
        time.sleep(1)
    baseline = sorted(base)[len(base) // 2]
    outside0 = sorted(base_out)[len(base_out) // 2]
    doc["baseline"] = {"used_mib_samples": base, "used_mib": baseline,
                       "outside_pss_mib_samples": base_out, "outside_pss_mib": outside0,
                       "outside_top": b["outside_top"]}
    print(f"bench: idle machine used {baseline:.1f} MiB (samples {', '.join(f'{b:.0f}' for b in base)}); "
          f"other processes' PSS {outside0:.1f} MiB", flush=True)

    def rise(s: dict[str, Any]) -> float:
        return round(s["used_mib"] - baseline, 1)

    def rise_adj(s: dict[str, Any]) -> float:
        """The rise less what processes outside our Ray session grew by meanwhile."""
        return round(s["used_mib"] - baseline - (s["outside_pss_mib"] - outside0), 1)

    proc = None
    try:
        # 2. Start as users do.
        t0 = time.monotonic()
        print(f"bench: $ {' '.join(serve_cmd)}", flush=True)
        proc = subprocess.Popen(serve_cmd, cwd=ROOT, env=serve_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=_pump, args=(proc.stdout, "  | "), daemon=True).start()
        wait_ready(args.ready_timeout, proc)
        session = session_markers()
        doc["ready_s"] = round(time.monotonic() - t0, 1)
        doc["session_markers"] = list(session)
        print(f"bench: ready in {doc['ready_s']:.0f} s ({', '.join(session) or '?'}); settling "
              f"{args.settle_seconds:.0f} s", flush=True)
        if not session:
            raise RuntimeError("no session_dir in horizon's state file: cannot tell our processes apart")

        # 3. Idle.
        time.sleep(args.settle_seconds)
        idle = sample(session)
        doc["idle"] = {"sample": idle, "rise_mib": rise(idle), "rise_adjusted_mib": rise_adj(idle),
                       "table": group_table(idle)}
        print_table("Idle (ready + settle)", doc["idle"]["table"], idle["total_pss_mib"], rise(idle), rise_adj(idle))
        if args.idle_cpu_seconds > 0:
            doc["idle_cpu"] = idle_cpu(session, args.idle_cpu_seconds)
            print_cpu_table(doc["idle_cpu"])

        # 4. Load.
        print(f"\nbench: load: 8 chat clients + 1 embeddings client for {args.load_seconds:.0f} s", flush=True)
        stats, samples = asyncio.run(run_load(args.load_seconds, 8, 0.0, 10.0, session))
        peak = max(samples, key=lambda s: s["total_pss_mib"])
        max_used = max(s["used_mib"] for s in samples)
        max_adj = max(rise_adj(s) for s in samples)
        doc["load"] = {"seconds": args.load_seconds, "chat_clients": 8, "embed_clients": 1,
                       "requests": stats.summary(), "table_max": max_table(samples),
                       "max_total_pss_mib": peak["total_pss_mib"], "max_used_mib": max_used,
                       "max_rise_mib": round(max_used - baseline, 1), "max_rise_adjusted_mib": max_adj,
                       "peak_sample": peak,
                       "samples": [strip_members(s) for s in samples]}
        print_table("Under load (max per group over the samples)", doc["load"]["table_max"],
                    peak["total_pss_mib"], doc["load"]["max_rise_mib"], max_adj)
        print(f"requests: {json.dumps(stats.summary())}")

        # 5. Soak.
        chat_clients, embed_rate = max(0, args.soak_chat_clients), max(0.0, args.soak_embed_rate)
        print(f"\nbench: soak: {chat_clients} chat clients + {embed_rate:g} embeddings call/s for "
              f"{args.soak_seconds:.0f} s", flush=True)
        stats, samples = asyncio.run(run_load(args.soak_seconds, chat_clients,
                                              1.0 / embed_rate if embed_rate else None, 15.0, session))
        pss_pts = [(s["elapsed_s"], s["total_pss_mib"]) for s in samples]
        used_pts = [(s["elapsed_s"], s["used_mib"]) for s in samples]
        adj_pts = [(s["elapsed_s"], rise_adj(s)) for s in samples]
        soak = {"seconds": args.soak_seconds, "chat_clients": chat_clients, "embed_rate_per_s": embed_rate,
                "requests": stats.summary(),
                "pss_slope_mib_per_min": slope_per_min(pss_pts), "used_slope_mib_per_min": slope_per_min(used_pts),
                "rise_adjusted_slope_mib_per_min": slope_per_min(adj_pts),
                "pss_first_mib": pss_pts[0][1], "pss_last_mib": pss_pts[-1][1],
                "used_first_mib": used_pts[0][1], "used_last_mib": used_pts[-1][1],
                "rise_first_mib": rise(samples[0]), "rise_last_mib": rise(samples[-1]),
                "rise_adjusted_first_mib": adj_pts[0][1], "rise_adjusted_last_mib": adj_pts[-1][1],
                "max_rise_mib": round(max(y for _, y in used_pts) - baseline, 1),
                "max_rise_adjusted_mib": max(y for _, y in adj_pts),
                "table_last": group_table(samples[-1]), "table_max": max_table(samples),
                "group_pss_slope_mib_per_min": {g: slope_per_min([(s["elapsed_s"], s["groups"][g]["pss_mib"])
                                                                  for s in samples]) for g in GROUPS},
                "processes": process_names(samples),
                "samples": [compact_members(s) for s in samples]}
        for k in ("pss_slope_mib_per_min", "used_slope_mib_per_min", "rise_adjusted_slope_mib_per_min"):
            soak[k] = None if soak[k] is None else round(soak[k], 2)
        soak["group_pss_slope_mib_per_min"] = {g: (None if v is None else round(v, 2))
                                               for g, v in soak["group_pss_slope_mib_per_min"].items()}
        soak["windows"] = window_slopes(soak["samples"], args.window_seconds)
        doc["soak"] = soak
        print(f"\n### Soak ({args.soak_seconds:.0f} s, {len(samples)} samples every 15 s)\n")
        print("| series | first MiB | last MiB | slope MiB/min |")
        print("|---|---:|---:|---:|")
        print(f"| total PSS (ours) | {soak['pss_first_mib']:.1f} | {soak['pss_last_mib']:.1f} | "
              f"{soak['pss_slope_mib_per_min']} |")
        print(f"| used memory (machine) | {soak['used_first_mib']:.1f} | {soak['used_last_mib']:.1f} | "
              f"{soak['used_slope_mib_per_min']} |")
        print(f"| rise over idle, adjusted for other processes | {soak['rise_adjusted_first_mib']:.1f} | "
              f"{soak['rise_adjusted_last_mib']:.1f} | {soak['rise_adjusted_slope_mib_per_min']} |")
        print("\nper-group PSS slope MiB/min: " + ", ".join(
            f"{g} {v}" for g, v in soak["group_pss_slope_mib_per_min"].items() if v is not None and abs(v) >= 0.05))
        if len(soak["windows"]) > 1:
            shown = ("ingress", "vllm-k2", "ray-core", "serve-control", "embedder", "other-ray")
            print(f"\nslope per window of {args.window_seconds:.0f} s (MiB/min):\n")
            print("| window s | total PSS | " + " | ".join(shown) + " |")
            print("|---|---:|" + "---:|" * len(shown))
            for w in soak["windows"]:
                print(f"| {w['start_s']:.0f}–{w['end_s']:.0f} | {w['pss_slope_mib_per_min']} | " + " | ".join(
                    str(w["group_pss_slope_mib_per_min"].get(g)) for g in shown) + " |")
        if soak["windows"]:
            last = soak["windows"][-1]["process_pss_slope_mib_per_min"]
            print("\nprocesses moving ≥ 0.05 MiB/min in the last window: " + (", ".join(
                f"{soak['processes'].get(pid, pid)[:60]} (pid {pid}) {v:+}" for pid, v in
                sorted(last.items(), key=lambda kv: -abs(kv[1]))[:8]) or "none"))
        print(f"requests: {json.dumps(stats.summary())}")

        print("\n### Summary\n")
        print("| phase | total PSS MiB | used above idle MiB | adjusted for other processes MiB |")
        print("|---|---:|---:|---:|")
        print(f"| idle | {idle['total_pss_mib']:.1f} | {doc['idle']['rise_mib']:.1f} | "
              f"{doc['idle']['rise_adjusted_mib']:.1f} |")
        print(f"| load (max) | {peak['total_pss_mib']:.1f} | {doc['load']['max_rise_mib']:.1f} | {max_adj:.1f} |")
        print(f"| soak (last) | {soak['pss_last_mib']:.1f} | {soak['rise_last_mib']:.1f} | "
              f"{soak['rise_adjusted_last_mib']:.1f} |")
        worst = max(doc["idle"]["rise_mib"], doc["load"]["max_rise_mib"], soak["max_rise_mib"])
        worst_adj = max(doc["idle"]["rise_adjusted_mib"], max_adj, soak["max_rise_adjusted_mib"])
        worst_pss = max(idle["total_pss_mib"], peak["total_pss_mib"], max(s["total_pss_mib"] for s in samples))
        doc["worst"] = {"rise_mib": worst, "rise_adjusted_mib": worst_adj, "total_pss_mib": worst_pss,
                        "within_target_4gib": worst_adj <= 4096}
        print(f"\nworst rise over the idle machine: {worst:.1f} MiB ({worst / 1024:.2f} GiB); adjusted for other "
              f"processes {worst_adj:.1f} MiB ({worst_adj / 1024:.2f} GiB); worst total PSS {worst_pss:.1f} MiB — "
              f"{'within' if worst_adj <= 4096 else 'OVER'} the 4 GiB target")
        print(f"machine: {doc['machine']['cpus']} CPUs, {doc['machine']['cpu']}, "
              f"{doc['machine']['mem_total_mib'] / 1024:.1f} GiB; command: {doc['command']}")
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()  # its own clean shutdown (SIGTERM), then horizon stop below
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
        print("bench: $ .venv/bin/horizon stop", flush=True)
        subprocess.run([HORIZON, "stop"], cwd=ROOT, timeout=300)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"bench: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
