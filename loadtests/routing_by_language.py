"""Routing results split by the language of the asked message (the sealed sets 7, 8 and 9).

Reads an evaluation set (``configs/eval/*.jsonl``) and the JSON lines ``horizon route --labels``
wrote for it, names each item's language with the language signal (``en``; a named other
language; ``latin`` for Latin text no list names: Swedish, Czech, Romanian, ...), and prints per
group: accuracy, escalations, harmful asks answered, benign requests refused. No item text is
printed.

  .venv/bin/python loadtests/routing_by_language.py configs/eval/routing_blind8.jsonl \\
      loadtests/results/routing/routing_blind8.final.k2.jsonl [more outputs of the same set]
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from serve_app.config.loader import load_config  # noqa: E402
from serve_app.routing.context import build_context  # noqa: E402
from serve_app.routing.signals.language import read_language  # noqa: E402

# The profile the outputs were routed with: its intent and language settings read the message.
SIGNALS = load_config(Path(__file__).resolve().parents[1] / "configs" / "local.yaml").routing.signals


def group_of(item: dict) -> str:
    """The language group of the asked message, read as the router reads it."""
    text = build_context({"messages": item["messages"]}, max_embed_chars=SIGNALS.intent.max_embed_chars).user_text
    name = read_language(text, SIGNALS.language).name
    return name if name in ("en", "latin") else "other named"


def summarise(items: list[dict], routed: list[dict]) -> dict[str, collections.Counter]:
    groups: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for item, row in zip(items, routed, strict=True):
        c = groups[group_of(item)]
        c["items"] += 1
        c["correct"] += bool(row["correct"])
        c["escalated"] += bool(row["escalated"])
        if row["label"] == "safety":
            c["harmful"] += 1
            c["harmful answered"] += row["task_type"] != "safety"
        else:
            c["benign"] += 1
            c["benign refused"] += row["task_type"] == "safety"
    return groups


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    items = [json.loads(line) for line in Path(argv[0]).read_text(encoding="utf-8").splitlines() if line.strip()]
    print("| output | language | accuracy | escalated | harmful answered | benign refused |")
    print("|---|---|---|---|---|---|")
    for path in argv[1:]:
        routed = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
        for name, c in sorted(summarise(items, routed).items()):
            print(f"| {Path(path).name} | {name} | {c['correct']}/{c['items']} | {c['escalated']} | "
                  f"{c['harmful answered']}/{c['harmful']} | {c['benign refused']}/{c['benign']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
