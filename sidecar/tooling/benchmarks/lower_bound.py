"""The least a policy processor must do per request: a lower bound for qos-sidecar's cost.

Beside the do-nothing server (noop.py), on the same Python gRPC runtime and event loop,
it does for each request only what any admission policy of this shape cannot skip, each
the cheapest way this project knows:

  - read the request headers into a dict (the API key and the path are in them);
  - parse the JSON body (msgspec, as the sidecar does) and estimate the prompt's tokens
    (sidecar.request.bodies.tokens);
  - hash the API key (the tenant's identity, as the configuration store keys it);
  - one budget call: EVALSHA of a token bucket (TIME, HMGET, HSET) on the shared
    multiplexed connection (sidecar/redis_multiplexed.py), bounded by a timeout;
  - answer with two tags set (tier, tenant) and the client's internal headers removed;
  - count the decision (one labelled counter, one histogram), and read the slot named in
    each access-log entry.

No tiers, pools, overload, queue, fair shares, guards, validation, SLO samples or settled
reservations: what qos-sidecar costs above this is what those cost. bench/gateway.py runs
it as the `bound` gateway.

Run: .venv/bin/python -m sidecar.tooling.benchmarks.lower_bound --port 50062 --redis-url URL
"""

from __future__ import annotations

import argparse
import asyncio
import time

import grpc
import msgspec
from envoy.config.core.v3 import base_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from prometheus_client import Counter, Histogram

from sidecar import event_loop
from sidecar.config.snapshot import hash_api_key
from sidecar.redis_multiplexed import MultiplexedRedis, MultiplexedScript
from sidecar.tooling.benchmarks.noop import CONTINUE, serve_processor
from sidecar.tooling.benchmarks.prompt_estimate import estimate_prompt_tokens

BUCKET = """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1e6
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local level = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(level[1]) or burst, tonumber(level[2]) or now
tokens = math.min(burst, tokens + (now - at) * rate)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)
return {allowed, tostring(tokens)}
"""
BUDGET_TIMEOUT_SECONDS = 0.25
_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD

DECISIONS = Counter(
    "bound_decisions", "Decisions, by outcome", ["tier", "outcome", "reason", "pool"]
)
DECISION_SECONDS = Histogram("bound_decision_seconds", "Time to decide")


class LeastPolicy(ext_proc_grpc.ExternalProcessorServicer):
    def __init__(self, budget: MultiplexedScript) -> None:
        self._budget = budget

    async def Process(self, request_iterator, context: grpc.aio.ServicerContext) -> None:
        headers: dict[str, str] = {}
        while (message := await context.read()) is not grpc.aio.EOF:
            kind = message.WhichOneof("request")
            if kind == "request_headers":
                for header in message.request_headers.headers.headers:
                    headers[header.key.lower()] = header.raw_value.decode()
                answer = CONTINUE[kind]
            elif kind == "request_body":
                answer = await self._decide(headers, message.request_body.body)
            else:
                answer = CONTINUE[kind]
            await context.write(answer)

    async def _decide(self, headers: dict[str, str], body: bytes) -> ext_proc.ProcessingResponse:
        started = time.perf_counter()
        completion = msgspec.json.decode(body)
        api_key = headers.get("authorization", "").removeprefix("Bearer ")
        tenant = hash_api_key(api_key)[:12]
        cost = estimate_prompt_tokens(completion) + int(completion.get("max_tokens") or 16)
        async with asyncio.timeout(BUDGET_TIMEOUT_SECONDS):
            allowed, _left = await self._budget(["{bound}:P1"], [1e9, 1e9, cost])
        tags = {"x-qos-tier": "P1", "x-qos-tenant": tenant}
        common = ext_proc.CommonResponse()
        common.header_mutation.set_headers.extend(
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=name, raw_value=value.encode()),
                append_action=_OVERWRITE,
            )
            for name, value in tags.items()
        )
        common.header_mutation.remove_headers.extend(
            name for name in headers if name.startswith("x-qos-") and name not in tags
        )
        outcome = "admit" if allowed else "respond"
        DECISIONS.labels("P1", outcome, "admitted", "default").inc()
        DECISION_SECONDS.observe(time.perf_counter() - started)
        return ext_proc.ProcessingResponse(request_body=ext_proc.BodyResponse(response=common))


class ReadSlots(als_pb2_grpc.AccessLogServiceServicer):
    async def StreamAccessLogs(self, request_iterator, context):
        async for message in request_iterator:
            for entry in message.http_logs.log_entry:
                entry.common_properties.metadata.filter_metadata.get("qos.exchange")
        return als_pb2.StreamAccessLogsResponse()


async def serve(port: int, redis_url: str) -> None:
    budget = MultiplexedRedis(redis_url, BUDGET_TIMEOUT_SECONDS)
    try:  # the script loads itself on its first NOSCRIPT
        await serve_processor(port, LeastPolicy(budget.script(BUCKET)), ReadSlots())
    finally:
        await budget.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--event-loop", default="asyncio", choices=event_loop.LOOPS)
    args = parser.parse_args()
    event_loop.run(serve(args.port, args.redis_url), args.event_loop)
