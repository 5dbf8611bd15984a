"""Compare interleaved ``bench_memory.py`` runs of two or more code variants.

The runs are ``<dir>/<variant>-r<round>.json`` (as ``bench_memory.py --out`` wrote them); each
row is a figure of every run, and the table gives every round's value and the median (min–max)
per variant. Rows: the machine's used memory above the idle machine (idle and the worst of idle,
load and soak), the total PSS idle, one process group's PSS and process count, and CPU while
idle in percent of one core (all the gateway's processes, the group, the whole machine).

    .venv/bin/python loadtests/compare_memory_runs.py loadtests/results/state_actor-stop55 \
        --variants before after --group other-ray
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.lib.rounds import fmt, stats  # noqa: E402

ROUND = re.compile(r"^(?P<variant>.+)-r(?P<round>\d+)\.json$")


def load_runs(folder: Path) -> dict[str, dict[int, dict[str, Any]]]:
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.json")):
        m = ROUND.match(path.name)
        if m:
            runs.setdefault(m["variant"], {})[int(m["round"])] = json.loads(path.read_text())
    return runs


def _group_row(table: list[dict[str, Any]], group: str, key: str) -> float:
    return next((float(r[key]) for r in table if r["group"] == group), 0.0)


def figures(group: str) -> list[tuple[str, Callable[[dict[str, Any]], float]]]:
    return [
        ("used memory above the idle machine, idle (MiB)", lambda r: r["idle"]["rise_mib"]),
        ("used memory above the idle machine, worst of idle, load and soak (MiB)", lambda r: r["worst"]["rise_mib"]),
        ("total PSS, idle (MiB)", lambda r: sum(x["pss_mib"] for x in r["idle"]["table"])),
        (f"`{group}` PSS, idle (MiB)", lambda r: _group_row(r["idle"]["table"], group, "pss_mib")),
        (f"`{group}` processes", lambda r: _group_row(r["idle"]["table"], group, "processes")),
        ("CPU while idle, every process of the gateway (% of one core)", lambda r: r["idle_cpu"]["total_pct_of_core"]),
        (f"CPU while idle, `{group}` (% of one core)", lambda r: r["idle_cpu"]["groups"].get(group, 0.0)),
        ("CPU while idle, the whole machine (% of one core)", lambda r: r["idle_cpu"]["machine_busy_pct_of_core"]),
    ]


def table(runs: dict[str, dict[int, dict[str, Any]]], variants: list[str], group: str) -> tuple[str, dict]:
    missing = [v for v in variants if v not in runs]
    if missing:
        raise SystemExit(f"no runs of {missing} (found: {sorted(runs)})")
    lines = ["| figure | " + " | ".join(f"{v}: median (min–max)" for v in variants) + " | every round |",
             "|---|" + "---|" * len(variants) + "---|"]
    out: dict[str, dict[str, Any]] = {}
    for name, get in figures(group):
        per_variant = {v: {r: get(runs[v][r]) for r in sorted(runs[v])} for v in variants}
        out[name] = {v: {"rounds": per, **stats(list(per.values()))} for v, per in per_variant.items()}
        rounds = "; ".join(f"{v} " + " / ".join(f"{x:.2f}" for x in per.values()) for v, per in per_variant.items())
        lines.append(f"| {name} | " + " | ".join(fmt(out[name][v]) for v in variants)
                     + f" | {rounds} |")
    return "\n".join(lines), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--variants", nargs="+", required=True)
    ap.add_argument("--group", default="other-ray", help="the process group to show on its own rows")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    text, out = table(load_runs(args.folder), args.variants, args.group)
    print(text)
    if args.out:
        args.out.write_text(json.dumps({"folder": str(args.folder), "variants": args.variants,
                                        "group": args.group, "figures": out}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
