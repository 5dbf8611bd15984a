"""Does vLLM's engine itself grow with requests? The engine core and its worker in this one
process, driven with steady chat requests; PSS every ``--every`` requests.

In the embedded default's soak (``bench_memory.py``) vLLM's three processes (the Serve replica,
``EngineCore``, ``Worker``) keep growing about 0.1 MiB/min each under steady chat load, and an
idle soak (no requests) shows they do not grow with time alone. This probe takes the Serve
replica, the OpenAI frontend and the inter-process transports away: ``vllm.LLM`` with
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and the ``uni`` executor runs the scheduler and the model
runner in this process, with the engine arguments ``configs/local.yaml`` gives model ``k2``
(its locally built SmolLM2-135M checkpoint). If PSS stays flat here over as many requests as the
soak served, the growth is in what was taken away, not in the engine.

``--separate-processes`` puts the transports back: the engine core in a child process (vLLM's
default) and the model runner in a worker process of its own (the ``mp`` executor), as in the
Serve deployment, still without Serve or the OpenAI frontend; PSS is then given per process.

Prompts: the chat template applied to ``--prompts`` distinct questions, taken in turn;
``--batch`` requests at a time (``max_num_seqs`` is 16), ``--max-tokens`` each. After a warm-up
of 64 requests, the collector runs before each sample so that only live memory counts.

  .venv/bin/python loadtests/probe_vllm_memory.py [--requests 1600] [--batch 16] [--out PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def slope_per_1000(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of PSS (MiB) per 1,000 requests."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 1000 * sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--every", type=int, default=160, help="sample PSS every this many requests")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=50)
    ap.add_argument("--separate-processes", action="store_true",
                    help="engine core and worker in processes of their own (vLLM's layout in the deployment)")
    ap.add_argument("--out", default=str(ROOT / "loadtests" / "results" / "vllm-inprocess-memory.json"))
    args = ap.parse_args()

    if not args.separate_processes:
        # Before vLLM is imported: the engine core in this process, not in a child.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import psutil
    from vllm import LLM, SamplingParams

    from deployments.model_assets import resolve_model_path
    from serve_app.config.loader import load_config
    from serve_app.fleet.backends.vllm import engine_kwargs

    cfg = load_config(ROOT / "configs" / "local.yaml")
    model = next(m for m in cfg.models if m.alias == "k2")
    kwargs = {**engine_kwargs(model, frontend=False),
              "distributed_executor_backend": "mp" if args.separate_processes else "uni"}
    llm = LLM(model=resolve_model_path(model.engine.model), **kwargs)
    tokenizer = llm.get_tokenizer()
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": f"Write a haiku about the sea, number {i}."}],
                                             tokenize=False, add_generation_prompt=True)
               for i in range(args.prompts)]
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=0.7)

    def serve(start: int, count: int) -> None:
        llm.generate([prompts[j % len(prompts)] for j in range(start, start + count)], sampling, use_tqdm=False)

    def pss_by_process() -> dict[str, float]:
        """This process's PSS and each descendant's, by process title (vLLM names its own)."""
        gc.collect()
        me = psutil.Process()
        out: dict[str, float] = {}
        for proc in [me, *me.children(recursive=True)]:
            try:
                name = "probe" if proc.pid == me.pid else proc.name()
                out[name] = round(out.get(name, 0.0) + proc.memory_full_info().pss / 2**20, 1)
            except psutil.Error:
                continue
        return out

    def sample(done: int, elapsed_s: float) -> dict:
        by_process = pss_by_process()
        return {"requests": done, "pss_mib": round(sum(by_process.values()), 1), "elapsed_s": elapsed_s,
                "pss_by_process_mib": by_process}

    serve(0, 64)
    t0 = time.monotonic()
    samples = [sample(0, 0.0)]
    print(json.dumps(samples[-1]), flush=True)
    done = 0
    while done < args.requests:
        serve(done, args.batch)
        done += args.batch
        if done % args.every < args.batch:
            samples.append(sample(done, round(time.monotonic() - t0, 1)))
            print(json.dumps(samples[-1]), flush=True)
    half = [(s["requests"], s["pss_mib"]) for s in samples if s["requests"] >= args.requests / 2]
    result = {"command": ".venv/bin/python loadtests/probe_vllm_memory.py " + " ".join(sys.argv[1:]),
              "engine_kwargs": {k: v for k, v in kwargs.items()}, "requests": done,
              "samples": samples,
              "pss_slope_mib_per_1000_requests": round(slope_per_1000([(s["requests"], s["pss_mib"]) for s in samples]), 2),
              "second_half_slope_mib_per_1000_requests": round(slope_per_1000(half), 2) if len(half) > 1 else None,
              "second_half_slope_by_process": {
                  name: round(slope_per_1000([(s["requests"], s["pss_by_process_mib"].get(name, 0.0))
                                              for s in samples if s["requests"] >= args.requests / 2]), 2)
                  for name in samples[-1]["pss_by_process_mib"]}}
    print(f"PSS {samples[0]['pss_mib']} -> {samples[-1]['pss_mib']} MiB over {done} requests; slope "
          f"{result['pss_slope_mib_per_1000_requests']} MiB per 1,000 requests (second half "
          f"{result['second_half_slope_mib_per_1000_requests']}; by process "
          f"{result['second_half_slope_by_process']})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
