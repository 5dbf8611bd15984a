"""Run one Fusion request end to end on the embedded CPU default and print answer + trace.

Starts configs/local.yaml (real SmolLM2 on vLLM CPU for every text role, MiniLM embeddings) on a
local Ray cluster, sends one `vllm-sr/fusion` request with a request-scoped panel, and prints the
response headers, the answer and the `fusion` trace. Used for the README example.

  .venv/bin/python scripts/fusion_demo.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.bench_gateway import wait_ready  # noqa: E402
from loadtests.lib.serve_cluster import serve_cluster  # noqa: E402


def main() -> int:
    from openai import OpenAI

    from deployments.model_assets import build_smollm2

    build_smollm2()
    with serve_cluster() as port:
        # Imported here: serve_cluster() sets Serve's fast-mode environment, which Serve reads
        # when it is first imported.
        from ray import serve

        from serve_app.app import build_app
        from serve_app.config.loader import horizon_args, read_document

        serve.run(build_app(dict(horizon_args(read_document(ROOT / "configs" / "local.yaml")))),
                  name="local", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        wait_ready(url)
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300)
        # A request-scoped panel (fusion_direct); the judge's analysis call gets k2's
        # fusion_judge default from the profile (docs/fusion.md).
        request = {"model": "vllm-sr/fusion", "max_tokens": 48, "temperature": 0,
                   "messages": [{"role": "user", "content": "Give one tip for writing clear Python code."}],
                   "plugins": [{"id": "fusion", "model": "k2",
                                "analysis_models": ["qwen-72b", "r1-distill", "coder"]}]}
        raw = client.chat.completions.with_raw_response.create(
            **{k: v for k, v in request.items() if k != "plugins"},
            extra_body={"plugins": request["plugins"]})
        body = json.loads(raw.text)
        print("# request\n" + json.dumps(request) + "\n")
        print("# headers")
        for key, value in sorted(raw.headers.items()):
            if key.startswith("x-vsr") or key == "x-request-id":
                print(f"{key}: {value}")
        print("\n# answer\n" + body["choices"][0]["message"]["content"])
        print("\n# usage\n" + json.dumps(body["usage"]))
        print("\n# fusion trace\n" + json.dumps(body.get("fusion"), indent=2)[:6000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
