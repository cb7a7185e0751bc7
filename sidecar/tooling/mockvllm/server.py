"""`qos-sidecar mock-vllm`: the simulated GPU behind vLLM's OpenAI-compatible HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sidecar import logs
from sidecar.config.schema import MediaConfig
from sidecar.options import setting
from sidecar.request.bodies.limits import InvalidRequest
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.request.bodies.read import read
from sidecar.request.bodies.tokens import estimate
from sidecar.request.policy.cost import prompt_tokens
from sidecar.routes.kinds import RouteKind
from sidecar.routes.table import RouteTable
from sidecar.tooling.mockvllm import choices
from sidecar.tooling.mockvllm.api_shapes import MessagesShaper, ResponsesShaper
from sidecar.tooling.mockvllm.dialect_metrics import DialectCollector
from sidecar.tooling.mockvllm.engine import (
    Engine,
    EngineConfig,
    QueueFull,
    RequestRejected,
    Sequence,
)
from sidecar.tooling.mockvllm.metrics import EngineCollector, LatencyMetrics
from sidecar.tooling.mockvllm.openai_shapes import (
    NO_STREAM_USAGE,
    ResponseShaper,
    error_body,
    usage,
)
from sidecar.tooling.mockvllm.streaming import pieces

log = logging.getLogger(__name__)


METRICS_DIALECTS = ("vllm", "sglang", "trtllm", "triton", "tgi", "llamacpp")
# Above any body a gateway in front buffers (envoy.yaml: 4 MiB).
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Settings:
    host: str = setting("127.0.0.1", "MOCK_VLLM_HOST", "address to bind")
    port: int = setting(8000, "MOCK_VLLM_PORT", "HTTP port")
    model: str = setting(
        "mock-llm",
        "MOCK_VLLM_MODEL",
        "served model names, comma-separated, as vLLM's --served-model-name: the first names "
        "the model in answers and metrics, the others are aliases",
    )

    @property
    def served_names(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.model.split(",") if name.strip())

    @property
    def model_name(self) -> str:
        return self.served_names[0]

    kv_cache_tokens: int = setting(131_072, None, "KV-cache size in tokens")
    block_size: int = setting(16, None, "tokens per KV block")
    max_num_seqs: int = setting(256, None, "most sequences decoded together")
    max_model_len: int = setting(40_960, None, "longest context (prompt + output) in tokens")
    prefill_tokens_per_second: float = setting(16_384.0, None, "prefill speed")
    decode_step_ms: float = setting(25.0, None, "one decode step (TPOT of an unstalled batch)")
    output_tokens_min: int = setting(32, None, "shortest natural answer")
    output_tokens_max: int = setting(256, None, "longest natural answer")
    scheduling_policy: str = setting("fcfs", None, "fcfs or priority (lower value runs first)")
    chunked_prefill: bool = setting(
        True, None, "prefill long prompts a chunk per step beside the decode (vLLM's default)"
    )
    max_num_batched_tokens: int = setting(2048, None, "tokens one step schedules (chunked)")
    stream_interval: int = setting(
        1, None, "tokens a streamed chunk carries, at least (vLLM's --stream-interval)"
    )
    time_scale: float = setting(1.0, "MOCK_VLLM_TIME_SCALE", "multiplies every duration")
    seed: int = setting(0, "MOCK_VLLM_SEED", "seed of the answers' lengths and words")
    log_level: str = setting("INFO", "MOCK_VLLM_LOG_LEVEL", "log level")
    image_tokens: int = setting(
        576, None, "prompt tokens an image part takes (a 336-pixel CLIP encoder's 24 x 24)"
    )
    max_num_queued_reqs: int = setting(
        -1,
        None,
        "vLLM's --max-num-queued-reqs: past this many unfinished requests a newcomer is "
        "answered 503 (-1: no limit)",
    )
    metrics_dialect: str = setting(
        "vllm",
        None,
        "whose /metrics to expose: vllm, sglang, trtllm (trtllm-serve), triton (Triton's "
        "TensorRT-LLM backend), tgi or llamacpp (llama-server's current release)",
    )

    def engine_config(self) -> EngineConfig:
        if self.metrics_dialect not in METRICS_DIALECTS:
            known = ", ".join(METRICS_DIALECTS)
            raise SystemExit(f"--metrics-dialect {self.metrics_dialect!r}: one of {known}")
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise SystemExit(f"--scheduling-policy {self.scheduling_policy!r}: fcfs or priority")
        return EngineConfig(
            kv_cache_tokens=self.kv_cache_tokens,
            block_size=self.block_size,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
            prefill_tokens_per_second=self.prefill_tokens_per_second,
            decode_step_seconds=self.decode_step_ms / 1000.0,
            output_tokens_min=self.output_tokens_min,
            output_tokens_max=self.output_tokens_max,
            scheduling_policy=self.scheduling_policy,
            chunked_prefill=self.chunked_prefill,
            max_num_batched_tokens=self.max_num_batched_tokens,
            time_scale=self.time_scale,
            seed=self.seed,
            max_num_queued_reqs=None if self.max_num_queued_reqs < 0 else self.max_num_queued_reqs,
        )


# vLLM's default for /v1/completions without max_tokens (chat runs to the context's end).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
# The routes the mock serves (each as vLLM's API server does), read by the gateway's own
# readers: the same bodies, the same prompt estimate.
ROUTES = RouteTable()
GENERATING = (RouteKind.CHAT, RouteKind.COMPLETIONS, RouteKind.RESPONSES, RouteKind.MESSAGES)
SEVERAL = (RouteKind.CHAT, RouteKind.COMPLETIONS)  # the routes that answer `n` times
# Headers vLLM reads from clients that change how a request is scheduled.
PRIORITY_HEADER = "X-Vllm-Priority"
SCHEDULING_HEADERS = (PRIORITY_HEADER, "X-data-parallel-rank")


def header_priority(headers: Mapping[str, str], body_priority: int) -> int:
    """The priority vLLM 0.33 schedules by: the X-Vllm-Priority header when it is an
    integer (any case of the name), else the body's."""
    raw = headers.get(PRIORITY_HEADER)
    if raw is not None:
        with contextlib.suppress(ValueError):
            return int(raw)
    return body_priority


def _echo(request: web.Request, body: dict, priority: int) -> dict[str, str]:
    """What the gateway let through, echoed so tests can see what reached the GPU: the
    x-qos-* headers (and x_qos_* look-alikes), the scheduling headers, the priority used."""
    seen = {
        f"x-mock-saw-{name.lower()}": value
        for name, value in request.headers.items()
        if name.lower().replace("_", "-").startswith("x-qos-")
    }
    for name in SCHEDULING_HEADERS:
        if name in request.headers:
            seen[f"x-mock-saw-{name.lower()}"] = request.headers[name]
    if "priority" in body or PRIORITY_HEADER in request.headers:
        seen["x-mock-saw-priority"] = str(priority)
    return seen


class Shaper(Protocol):
    """One API's answer: whole, or as its stream (sidecar/tooling/mockvllm/*_shapes.py)."""

    def complete(self, text: str, finish_reason: str, tokens: dict[str, int]) -> dict: ...
    def first_bytes(self) -> bytes: ...
    def token(self, text: str, finish: str | None, generated: int = 0) -> bytes: ...
    def last_bytes(self, tokens: dict[str, int], include_usage: bool, finish: str) -> bytes: ...


def _error(
    status: int, message: str, param: str | None = None, err_type: str = "BadRequestError"
) -> web.Response:
    return web.json_response(error_body(message, status, err_type, param), status=status)


class MockVllm:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engine = Engine(settings.engine_config())
        self.registry = CollectorRegistry()
        if settings.metrics_dialect == "vllm":
            self.registry.register(EngineCollector(self.engine, settings.model_name))
            self._latency = LatencyMetrics(self.registry, settings.model_name)
            self.engine.on_finish = self._latency.observe
        else:  # another server's names only: no vllm: series for a reader to find
            self.registry.register(
                DialectCollector(self.engine, settings.model_name, settings.metrics_dialect)
            )

    def app(self) -> web.Application:
        # vLLM's server sets no body limit of its own (aiohttp's default is 1 MiB): a prompt
        # the gateway lets through gets vLLM's answer, a 400 if it is beyond the context.
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"):
            app.router.add_post(path, self.completions)
        app.router.add_post("/invocations", self.completions)
        app.router.add_post("/v1/embeddings", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.cleanup_ctx.append(self._engine_task)
        return app

    async def _engine_task(self, _app: web.Application):
        task = asyncio.create_task(self.engine.run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response()

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def models(self, _request: web.Request) -> web.Response:
        model = {
            "id": self.settings.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "vllm",
            "root": self.settings.model_name,
            "parent": None,
            "max_model_len": self.settings.max_model_len,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        route = ROUTES.resolve("POST", request.path)
        try:
            parsed = read(route, await request.read(), request.headers)
        except InvalidRequest as error:
            return _error(400, error.message, error.param)
        body = parsed.body
        if parsed.model is not None and parsed.model not in self.settings.served_names:
            return _error(
                404, f"The model `{parsed.model}` does not exist.", "model", "NotFoundError"
            )
        if body.get("stream_options") is not None and not parsed.stream:
            return _error(
                400, "Stream options can only be defined when `stream=True`.", "stream_options"
            )
        priority = body.get("priority", 0)
        if not isinstance(priority, int):
            return _error(400, "priority must be an integer.", "priority")
        interval = body.get("stream_interval")
        if interval is not None and (not isinstance(interval, int) or interval < 1):
            return _error(400, "stream_interval must be at least 1.", "stream_interval")
        priority = header_priority(request.headers, priority)
        generating = parsed.kind in GENERATING
        max_tokens = parsed.output.requested if parsed.output is not None else None
        if max_tokens is None and parsed.kind is RouteKind.COMPLETIONS:
            max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
        if not generating:
            max_tokens = 1  # a pooling request: the prefill, no decode
        media = MediaConfig(image_tokens=self.settings.image_tokens)
        tokens_in = prompt_tokens(parsed.prompt, estimate(parsed), media)
        # `n` (or `best_of`) answers of a chat or a completion: a sequence each, as vLLM
        # runs them.
        answers = parsed.output.per_request if parsed.kind in SEVERAL and parsed.output else 1
        sequences: list[Sequence] = []
        try:
            self.engine.check_admission(answers)
        except QueueFull as full:
            return _error(503, str(full), err_type="Service Unavailable")
        try:
            for _ in range(answers):
                sequences.append(
                    self.engine.submit(
                        tokens_in, max_tokens, priority, ignore_eos=body.get("ignore_eos") is True
                    )
                )
        except RequestRejected as error:
            for sequence in sequences:
                self.engine.abort(sequence)
            return _error(400, str(error), error.param)
        sequence = sequences[0]
        seen = _echo(request, body, priority)
        try:
            if not generating:
                return await self._embeddings(parsed, sequence, seen)
            shaper = self._shaper(parsed, tokens_in)
            interval = max(body.get("stream_interval") or 1, self.settings.stream_interval)
            if len(sequences) > 1 and isinstance(shaper, ResponseShaper):
                return await choices.answer(request, sequences, shaper, parsed, seen, interval)
            if parsed.stream:
                return await self._stream(
                    request, sequence, shaper, parsed.usage_in_stream, seen, interval
                )
            response = await self._whole(sequence, shaper)
            response.headers.update(seen)
            return response
        finally:
            for each in sequences:  # no-op once finished; frees a disconnected client's
                self.engine.abort(each)

    def _shaper(self, parsed: ParsedRequest, tokens_in: int) -> Shaper:
        model = self.settings.model_name
        if parsed.kind is RouteKind.RESPONSES:
            return ResponsesShaper(model, parsed.output.requested if parsed.output else None)
        if parsed.kind is RouteKind.MESSAGES:
            return MessagesShaper(model, tokens_in)
        chat = parsed.kind is RouteKind.CHAT
        kind = RouteKind.CHAT if chat else RouteKind.COMPLETIONS
        return ResponseShaper(kind, model, parsed.stream_usage or NO_STREAM_USAGE, tokens_in)

    async def _embeddings(
        self, parsed: ParsedRequest, sequence: Sequence, seen: dict[str, str]
    ) -> web.Response:
        while await sequence.output.get() is not None:  # the prefill, done
            pass
        inputs = parsed.body.get("input")
        count = len(inputs) if isinstance(inputs, list) and inputs else 1
        data = [
            {"index": index, "object": "embedding", "embedding": [0.0] * 8}
            for index in range(count)
        ]
        tokens = {"prompt_tokens": sequence.prompt_tokens, "total_tokens": sequence.prompt_tokens}
        answer = {
            "id": f"embd-{sequence.request_id}",
            "object": "list",
            "created": int(time.time()),
            "model": self.settings.model_name,
            "data": data,
            "usage": {**tokens, "completion_tokens": 0},
        }
        return web.json_response(answer, headers=seen)

    async def _whole(self, sequence: Sequence, shaper: Shaper) -> web.Response:
        pieces = []
        while (token := await sequence.output.get()) is not None:
            pieces.append(token)
        tokens = usage(sequence.prompt_tokens, sequence.generated)
        return web.json_response(
            shaper.complete("".join(pieces), sequence.finish_reason or "stop", tokens)
        )

    async def _stream(
        self,
        request: web.Request,
        sequence: Sequence,
        shaper: Shaper,
        include_usage: bool,
        extra_headers: dict[str, str],
        interval: int,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                **extra_headers,
            }
        )
        await response.prepare(request)  # headers go out at once, as uvicorn sends them
        started = False
        async for text, finish, generated in pieces(sequence, interval):
            if not started:  # like vLLM: the opening comes with the first token
                await response.write(shaper.first_bytes())
                started = True
            await response.write(shaper.token(text, finish, generated))
        if not started:
            await response.write(shaper.first_bytes())
        tokens = usage(sequence.prompt_tokens, sequence.generated)
        await response.write(
            shaper.last_bytes(tokens, include_usage, sequence.finish_reason or "stop")
        )
        await response.write_eof()
        return response


async def run(settings: Settings) -> None:
    mock = MockVllm(settings)
    # Like vLLM, abort a request whose client went away, streaming or not.
    # vLLM's server (uvicorn with httptools) takes header lines of any length Envoy lets
    # through (60 KiB); aiohttp's default of 8 KiB would refuse what vLLM accepts.
    runner = web.AppRunner(
        mock.app(), handler_cancellation=True, max_line_size=65536, max_field_size=65536
    )
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port).start()
    log.info("mock vLLM serving", extra={"port": settings.port, "model": settings.model_name})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(settings: Settings) -> int:
    logs.configure(settings.log_level, "mock-vllm")
    asyncio.run(run(settings))
    return 0
