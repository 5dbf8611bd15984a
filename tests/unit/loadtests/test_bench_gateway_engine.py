"""The engine phases of bench_gateway.py: the gateway side reuses pooled connections, as an
OpenAI client does, so a phase does not charge the gateway for the benchmark's own clients."""

import asyncio

from fake_openai_server import TOKENS, TTFT_S, FakeOpenAIServer

from loadtests.bench_gateway import engine_tokens_per_s, gateway_tokens, paired_tokens_per_s, pooled_client

REQUESTS, IN_FLIGHT = 8, 2


def body(i: int) -> dict:
    return {"model": "k2", "max_tokens": 8, "messages": [{"role": "user", "content": f"story {i}"}]}


def test_a_phase_reuses_at_most_one_connection_per_request_in_flight():
    async def phase(url: str) -> float:
        async with pooled_client(IN_FLIGHT) as client:
            call = gateway_tokens(client, f"{url}/v1/chat/completions", body)
            return await engine_tokens_per_s(call, concurrency=IN_FLIGHT, requests=REQUESTS)

    with FakeOpenAIServer() as server:
        tokens_per_s = asyncio.run(phase(server.url))
        assert sorted(r["messages"][0]["content"] for r in server.requests) == \
            sorted(f"story {i}" for i in range(REQUESTS))
        # A client per request opened one connection per request (8 here).
        assert 1 <= len(server.peers) <= IN_FLIGHT
    # Every answer's completion tokens, over a phase no shorter than its waves of answers.
    assert 0 < tokens_per_s <= REQUESTS * TOKENS / (REQUESTS / IN_FLIGHT * TTFT_S)


def test_paired_phase_runs_both_paths_at_once_and_rates_each_by_its_own_answers():
    in_flight = {"direct": 0, "ingress": 0}
    most = {"direct": 0, "ingress": 0, "both": 0}
    seen: dict[str, list[int]] = {"direct": [], "ingress": []}

    def path(name: str, seconds: float, tokens: int):
        async def call(i: int) -> int:
            seen[name].append(i)
            in_flight[name] += 1
            most[name] = max(most[name], in_flight[name])
            most["both"] = max(most["both"], sum(in_flight.values()))
            await asyncio.sleep(seconds)
            in_flight[name] -= 1
            return tokens
        return call

    # The gateway path here takes three times as long a request: a third of the rate.
    rates = asyncio.run(paired_tokens_per_s(
        {"direct": path("direct", 0.02, 10), "ingress": path("ingress", 0.06, 10)},
        concurrency_each=2, requests_each=6))
    assert sorted(seen["direct"]) == sorted(seen["ingress"]) == list(range(6))
    assert most["direct"] == most["ingress"] == 2 and most["both"] == 4
    assert set(rates) == {"direct", "ingress"}
    assert 0.15 < rates["ingress"] / rates["direct"] < 0.6
