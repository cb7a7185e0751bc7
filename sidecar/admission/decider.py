"""Admission: identity → tier, body checks and guards, overload, budget, slot → decision.

route ─▶ identify ─▶ read the body ─▶ guards ─▶ overload shed? ─▶ budget (one Redis call)
                                                              │ short: wait for it, or shed
                                                              ▼
                                         slot free? ─▶ admit │ else wait in the queue
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.admission.identity import Identity, IdentityResolver, Unauthenticated
from sidecar.bodies.parsed import ParsedRequest, ResponseShape, TextForm
from sidecar.bodies.read import read
from sidecar.completion.access_log import LOGGED_HEADERS
from sidecar.config.pools import DEFAULT_POOL, Pool
from sidecar.config.schema import Mode, Tenant, Tier, TierConfig
from sidecar.config.store import Snapshot
from sidecar.limiter.buckets import (
    BucketSpec,
    FairShare,
    Limiter,
    Verdict,
    fair_share_keys,
    tenant_bucket_key,
    tier_bucket_key,
)
from sidecar.limiter.resilient import LocalTokenBuckets
from sidecar.openai_api.prompt import TextCounter
from sidecar.openai_api.request import InvalidRequest
from sidecar.overload.monitor import HeldAdmission
from sidecar.overload.shedding import SheddingState, overload_refusal
from sidecar.policy.cost import Charge, Reservation, charge, prompt_tokens
from sidecar.policy.decision import Admit, Decision, Final, Hold, RequestView, Respond
from sidecar.policy.engine import EngineFields, client_control_headers, engine_fields
from sidecar.policy.guards import apply_guards
from sidecar.policy.refusals import Reason, Refusal
from sidecar.policy.responses import respond
from sidecar.queueing.queue import AdmissionQueue, QueueFull
from sidecar.routes.kinds import RouteKind

log = logging.getLogger(__name__)
# How soon a budget waiter looks again when another waiter of its bucket asks Redis.
ASKING_AGAIN_SECONDS = (0.002, 0.010)

INTERNAL_PREFIX = "x-qos-"
# Envoy routes on it to the cluster named after the pool (route cluster_header); set by
# the sidecar only, for every pool but the default one, whose cluster is Envoy's fallback.
POOL_HEADER = "x-qos-pool"
# Marks a stream whose usage Envoy is to read for its settlement.
USAGE_HEADER = "x-qos-usage"


class Projection(Protocol):
    def hold(
        self, tier: Tier, pool: Pool, prompt_tokens: int, even_over_budget: bool
    ) -> HeldAdmission | None: ...


@dataclass(frozen=True)
class _Request:
    """One completion request on its way through admission."""

    view: RequestView
    snapshot: Snapshot
    identity: Identity
    parsed: ParsedRequest
    body: dict[str, Any] | None  # the body to forward instead, when it changed
    pool: Pool  # the pool serving the request's model
    charge: Charge  # what it costs its budgets
    reservation: Reservation | None = None  # what it took, when it is settled at its end

    @property
    def tier(self) -> Tier:
        return self.identity.tier

    @property
    def tier_config(self) -> TierConfig:
        return self.pool.tiers[self.tier]

    def refuse(self, reason: Reason, message: str = "") -> Respond:
        refusal = Refusal(reason, message or f"Tier {self.tier.value} is shed: {reason.value}.")
        answer = respond(refusal, self.parsed.shape, self.tier_config, self.tier.value)
        return dataclasses.replace(answer, pool=self.pool.name)


class AdmissionDecider:
    def __init__(
        self,
        snapshot: Callable[[], Snapshot],  # the configuration in force
        identity: IdentityResolver,
        limiter: Limiter,
        count_text: TextCounter,
        shedding: Callable[[], SheddingState] = SheddingState,
        queue: AdmissionQueue | None = None,
        clock: Callable[[], float] = time.monotonic,
        sample: Callable[[], float] = random.random,
        projection: Projection | None = None,  # admissions' load before pods report it
    ) -> None:
        self._projection = projection
        self._snapshot = snapshot
        self._identity = identity
        self._limiter = limiter
        self._count_text = count_text
        self._shedding = shedding
        self._queue = queue
        self._clock = clock
        # Budget tokens that requests held here are waiting for, per bucket: a newcomer
        # waits behind them, so it is held only if the bucket can serve them all in time.
        self._budget_waiting: dict[str, float] = {}
        # Per bucket, held while one of its waiters asks Redis.
        self._budget_asking: dict[str, asyncio.Lock] = {}
        self._watch_budget = LocalTokenBuckets(clock)
        self._sample = sample
        # Tokens left in each pool's tier bucket after this sidecar's last call, /metrics.
        self.bucket_levels: dict[tuple[str, Tier], float] = {}
        self._settling: set[asyncio.Task[float | None]] = set()

    def watch_response(self) -> bool:
        """A sample of exchanges (slo.ttft_sample_rate, at most slo.ttft_samples_per_second)
        whose response is watched: their first token is timed."""
        slo = self._snapshot().config.slo
        if slo.ttft_sample_rate <= 0 or self._sample() >= slo.ttft_sample_rate:
            return False
        budget = BucketSpec(
            "ttft-samples", slo.ttft_samples_per_second, slo.ttft_samples_per_second
        )
        return self._watch_budget.acquire(1, [budget]).allowed

    async def decide(self, request: RequestView) -> Decision:
        snapshot = self._snapshot()
        decision = await self._decide(request, snapshot)
        if isinstance(decision, Respond) and snapshot.mode.mode is Mode.SHADOW:
            # Shadow: the decision is made and counted, the request goes through untouched.
            tier = Tier(decision.tier) if decision.tier else snapshot.config.identity.default_tier
            routed = decision.pool and decision.pool != DEFAULT_POOL
            route = {POOL_HEADER: decision.pool} if routed else {}
            admit = _tagged(request, tier.value, "shadow", None, f"shadow_{decision.reason}", route)
            return dataclasses.replace(admit, pool=decision.pool, reroute=bool(routed))
        return decision

    async def _decide(self, request: RequestView, snapshot: Snapshot) -> Decision:
        shape: ResponseShape | None = None
        tier_config: TierConfig | None = None
        identity: Identity | None = None
        pool: Pool | None = None
        try:
            route = snapshot.routes.resolve(request.method, request.path, _upgrades(request))
            shape = ResponseShape(route.kind.api)
            identity = await self._resolve(request, snapshot)
            tier_config = snapshot.config.tiers[identity.tier]
            if route.kind is RouteKind.PASS:
                return _admit(request, identity)  # no GPU work: tagged, not charged
            if route.kind is RouteKind.REFUSE:
                raise Refusal(
                    Reason.ROUTE_NOT_FOUND,
                    f"This gateway serves no {request.method} {route.path}.",
                )
            with _client_input(request):
                parsed = read(route, request.body or b"", request.headers)
            shape = parsed.shape
            pool = _pool(snapshot, parsed.model)
            tier_config = pool.tiers[identity.tier]
            with _client_input(request):
                tokens = prompt_tokens(parsed.prompt, self._count_text, snapshot.config.media)
                guarded = apply_guards(parsed, tier_config, identity.tier.value, tokens)
                cost = charge(tier_config, tokens, parsed.output)
            admission = _Request(request, snapshot, identity, parsed, guarded, pool, cost)
            return _charged(await self._admit_completion(admission), admission)
        except Refusal as refusal:
            tier_name = identity.tier.value if identity else ""
            answer = respond(refusal, shape, tier_config, tier_name)
            return dataclasses.replace(answer, pool=pool.name) if pool else answer

    async def _resolve(self, request: RequestView, snapshot: Snapshot) -> Identity:
        try:
            return await self._identity.resolve(request.headers, snapshot)
        except Unauthenticated:
            raise Refusal(
                Reason.UNAUTHENTICATED,
                "A valid API key is required: send it as 'Authorization: Bearer <key>'.",
            ) from None

    async def _admit_completion(self, request: _Request) -> Decision:
        pool_state = self._shedding().for_pool(request.pool.name)
        overload = overload_refusal(request.tier, request.snapshot, pool_state)
        if overload is not None:  # decided without Redis
            return request.refuse(overload)
        held = self._hold(request)  # counts in the pool's load until confirmed or not
        try:
            return await self._charge(request, pool_state, held)
        finally:
            if held is not None:
                held.cancel()  # not admitted (a no-op when it was confirmed)

    async def _charge(
        self, request: _Request, pool_state: SheddingState, held: HeldAdmission | None
    ) -> Decision:
        """Take the request's cost from its budgets (one Redis call), then a slot."""
        capacity = pool_state.capacity(request.pool)  # follows the pods that say theirs
        buckets = _buckets(request.snapshot, request.identity, request.pool, capacity)
        request = _within(request, buckets)
        cost = request.charge.reserved
        try:
            verdict = await self._limiter.acquire(cost, buckets, held.load if held else None)
            self.bucket_levels[request.pool.name, request.tier] = verdict.remaining
        except redis.RedisError as error:
            redis_errors.note("limiter")
            # Budgets are shared through Redis; without it, admit rather than refuse all.
            log.warning("limiter unavailable, admitting: %s", error)
            _confirm(held, recorded_ms=0)
            return await self._take_slot(request, "limiter_unavailable")
        if verdict.allowed:
            _confirm(held, verdict.recorded_ms)
            return await self._take_slot(_reserved(request, buckets))
        refused = buckets[verdict.refused or 0]
        if verdict.retry_after is None:
            raise _too_big(request, cost, verdict.refused or 0, refused)
        if verdict.refused and verdict.refused > 0:  # the tenant's own bucket
            raise Refusal(
                Reason.TENANT_RATE_LIMITED,
                f"Rate limit reached for tenant {request.identity.tenant_label}.",
                retry_after=verdict.retry_after,
            )
        if not request.tier_config.sheddable:
            _confirm(held, verdict.recorded_ms)
            return await self._take_slot(request, "admitted_over_budget")
        max_wait = request.tier_config.max_queue_wait_seconds
        waiting = _waiting_key(refused)
        ahead = self._budget_waiting.get(waiting, 0.0) / refused.rate
        if self._queue is not None and verdict.retry_after + ahead <= max_wait:
            return Hold(
                lambda: self._wait_for_budget(request, cost, waiting, buckets, verdict),
                max_wait,
                tier=request.tier.value,
            )
        return request.refuse(_budget_reason(verdict))

    def _hold(self, request: _Request) -> HeldAdmission | None:
        if self._projection is None:
            return None
        return self._projection.hold(
            request.tier,
            request.pool,
            request.charge.prompt_tokens,
            even_over_budget=not request.tier_config.sheddable,
        )

    async def _wait_for_budget(
        self, request: _Request, cost: float, key: str, buckets: list[BucketSpec], verdict: Verdict
    ) -> Final:
        """The tier's bucket refills soon: wait for it, then for a slot, within max wait.
        One waiter of a bucket asks Redis at a time: the others, finding it asking, look
        again a little later, in no set order (so a burst of waiters is not a burst of
        Redis calls each time the bucket refills, and who comes next is left to chance,
        as it was when all of them asked)."""
        started = self._clock()
        deadline = started + request.tier_config.max_queue_wait_seconds
        self._budget_waiting[key] = self._budget_waiting.get(key, 0.0) + cost
        asking = self._budget_asking.setdefault(key, asyncio.Lock())
        delay = verdict.retry_after or 0.0
        try:
            while True:
                await asyncio.sleep(delay)
                if asking.locked():
                    delay = random.uniform(*ASKING_AGAIN_SECONDS)
                    if self._clock() + delay > deadline:
                        return request.refuse(_budget_reason(verdict))
                    continue
                async with asking:
                    held = self._hold(request)
                    try:
                        verdict = await self._limiter.acquire(
                            cost, buckets, held.load if held else None
                        )
                        if verdict.allowed:
                            _confirm(held, verdict.recorded_ms)
                            break
                    finally:
                        if held is not None:
                            held.cancel()
                if verdict.retry_after is None or self._clock() + verdict.retry_after > deadline:
                    return request.refuse(_budget_reason(verdict))
                delay = verdict.retry_after
        finally:
            self._budget_waiting[key] -= cost
        request = _reserved(request, buckets)
        return await self._wait_for_slot(request, deadline - self._clock(), started)

    async def _take_slot(self, request: _Request, reason: str = "admitted") -> Decision:
        if self._queue is None:
            engine = _engine(request)
            return _admit(request.view, request.identity, engine, reason, pool=request.pool)
        stream = request.parsed.stream
        slot = self._queue.try_take(
            request.tier, request.identity.tenant_label, stream, request.pool, request.reservation
        )
        if slot is not None:
            return self._admit_with_slot(request, reason, slot.id, 0.0)
        max_wait = request.tier_config.max_queue_wait_seconds
        return Hold(
            lambda: self._wait_for_slot(request, max_wait, self._clock(), reason),
            max_wait,
            tier=request.tier.value,
        )

    async def _wait_for_slot(
        self, request: _Request, max_wait: float, started: float, reason: str = "admitted"
    ) -> Final:
        assert self._queue is not None
        try:
            slot = await self._queue.wait(
                request.tier,
                request.identity.tenant_label,
                max_wait,
                request.parsed.stream,
                request.pool,
                request.reservation,
            )
        except QueueFull:
            self._give_back(request.reservation)
            return request.refuse(Reason.SHED_QUEUE_FULL)
        if slot is None:
            self._give_back(request.reservation)
            return request.refuse(Reason.SHED_QUEUE_TIMEOUT)
        return self._admit_with_slot(request, reason, slot.id, self._clock() - started)

    def _give_back(self, reservation: Reservation | None) -> None:
        """A request shed after it took its budget never ran: its reservation goes back."""
        if reservation is not None:
            self.give_back(reservation, reservation.charge.reserved)

    def give_back(self, reservation: Reservation, tokens: float) -> None:
        """Give `tokens` back to the buckets a request reserved from (negative: take them,
        a debt), in the background: nobody waits on it."""
        task = asyncio.get_running_loop().create_task(
            self._limiter.settle(tokens, reservation.buckets)
        )
        self._settling.add(task)
        task.add_done_callback(lambda done: self._settled(done, reservation))

    def _settled(self, task: asyncio.Task[float | None], reservation: Reservation) -> None:
        self._settling.discard(task)
        if task.cancelled():
            return
        if task.exception() is not None:
            redis_errors.note("limiter")
            log.warning("settling a request failed: %s", task.exception())
        elif (level := task.result()) is not None:  # a debt shows at once, not next call
            self.bucket_levels[reservation.pool, reservation.tier] = level

    def _admit_with_slot(self, request: _Request, reason: str, slot: str, waited: float) -> Admit:
        admit = _admit(
            request.view, request.identity, _engine(request), reason, slot, waited, request.pool
        )
        if request.parsed.stream and request.view.response_watched:
            # Time this stream's first token: its response body will be watched.
            return dataclasses.replace(admit, time_first_byte=True)
        return admit


def _charged(decision: Decision, request: _Request) -> Decision:
    """The decision, its admission marked with the route and what it was charged."""
    if isinstance(decision, Admit):
        route, cost = request.parsed.kind.value, request.charge.reserved
        return dataclasses.replace(decision, route=route, cost=cost)
    if isinstance(decision, Hold):
        resume = decision.resume

        async def resumed() -> Final:
            final = _charged(await resume(), request)
            assert not isinstance(final, Hold)
            return final

        return dataclasses.replace(decision, resume=resumed)
    return decision


def _within(request: _Request, buckets: list[BucketSpec]) -> _Request:
    """The request reserving no more than its smallest bucket holds (the rest of its cost
    is owed when its answer is settled); refused when its prompt alone is more."""
    index, smallest = min(enumerate(buckets), key=lambda pair: pair[1].burst)
    charge = dataclasses.replace(request.charge, ceiling=smallest.burst)
    if charge.prompt_cost > smallest.burst:
        raise _too_big(request, charge.prompt_cost, index, smallest)
    return dataclasses.replace(request, charge=charge)


def _too_big(request: _Request, cost: float, index: int, bucket: BucketSpec) -> Refusal:
    """A prompt no burst of this budget holds: the message names the bucket, its size
    and the burst that would admit it."""
    seconds = cost / bucket.rate
    if index > 0:  # the tenant's own bucket
        whose = f"tenant {request.identity.tenant_label}'s budget"
        fix = (
            f"`qos-sidecar tenants add {request.identity.tenant_label} --update "
            f"--burst-seconds {seconds:.2g}`"
        )
    else:
        whose = f"tier {request.tier.value}'s budget"
        fix = f"tiers.{request.tier.value}.burst_seconds {seconds:.2g}"
    return Refusal(
        Reason.COST_EXCEEDS_BURST,
        f"This request's prompt costs {cost:.0f} budget tokens, more than the "
        f"{bucket.burst:.0f} {whose} can ever hold ({bucket.rate:g} tokens/s, "
        f"{bucket.burst / bucket.rate:g} s of burst). Shorten the prompt, or give the "
        f"budget a burst of {seconds:.2g} s: {fix}.",
    )


def _waiting_key(refused: BucketSpec) -> str:
    """Whom a request waits behind: those of its bucket or, in a tier shared fairly, those
    of its own tenant (a tenant over its share waits for what lies above the tier's
    reserve; the others must not wait behind it)."""
    return refused.key if refused.fair is None else f"{refused.key}|{refused.fair.tenant}"


def _budget_reason(verdict: Verdict) -> Reason:
    return Reason.SHED_FAIR_SHARE if verdict.over_fair_share else Reason.SHED_TIER_BUDGET


def _confirm(held: HeldAdmission | None, recorded_ms: int) -> None:
    if held is not None:
        held.confirm(recorded_ms)


def _buckets(
    snapshot: Snapshot, identity: Identity, pool: Pool, capacity: float
) -> list[BucketSpec]:
    tier = identity.tier
    settings = pool.tiers[tier]
    rate = snapshot.share(tier, pool) * capacity
    burst = rate * settings.burst_seconds
    tenant = snapshot.tenants.get(identity.tenant or "")
    fair = _fair_share(snapshot, identity, tenant, pool, burst)
    debt = settings.max_debt_seconds
    buckets = [BucketSpec(tier_bucket_key(tier.value, pool.name), rate, burst, fair, rate * debt)]
    if tenant is not None:
        tenant_rate, kept_for = tenant.rate_in(pool.name)
        if tenant_rate is not None:
            key = tenant_bucket_key(tier.value, identity.tenant_label, kept_for)
            tenant_burst = tenant_rate * tenant.burst_seconds
            buckets.append(BucketSpec(key, tenant_rate, tenant_burst, debt=tenant_rate * debt))
    return buckets


def _fair_share(
    snapshot: Snapshot, identity: Identity, tenant: Tenant | None, pool: Pool, burst: float
) -> FairShare | None:
    """Who asks the tier's bucket, for its fair shares (None: fairness is off)."""
    fairness = snapshot.config.fairness
    if not fairness.enabled:
        return None
    state_key, active_key = fair_share_keys(identity.tier.value, pool.name)
    return FairShare(
        state_key,
        active_key,
        identity.tenant_label,
        tenant.weight if tenant is not None else 1.0,
        fairness.window_seconds,
        fairness.active_seconds,
        fairness.reserve * burst,
    )


def _reserved(request: _Request, buckets: list[BucketSpec]) -> _Request:
    """The request with what it took from `buckets`, when its end settles it: when its
    tier charges output, or when part of its prompt was a configured estimate (media, a
    stored conversation) that the answer's usage corrects. Otherwise it was charged its
    prompt only: nothing to settle."""
    parsed = request.parsed
    if request.charge.output_weight <= 0 and not parsed.prompt.estimated_from_outside:
        return request
    reservation = Reservation(
        request.charge,
        tuple(buckets),
        parsed.shape.text is TextForm.CHAT,
        parsed.model or "",
        request.pool.name,
        request.tier,
        sized=parsed.shape.text in (TextForm.CHAT, TextForm.COMPLETION),
    )
    return dataclasses.replace(request, reservation=reservation)


def _pool(snapshot: Snapshot, model: str | None) -> Pool:
    """The pool serving `model`; a model no pool serves is answered as vLLM answers it."""
    pool = snapshot.pools.for_model(model)
    if pool is None:
        raise Refusal(
            Reason.MODEL_NOT_FOUND,
            f"The model `{model}` does not exist."
            if model
            else "This gateway serves several models: name one in `model`.",
            param="model",
        )
    return pool


def _engine(request: _Request) -> EngineFields:
    """The body and headers vLLM schedules by (the tier's priority, never the client's),
    and with pools configured the pool Envoy routes the request to."""
    changed = request.body is not None
    parsed = request.parsed
    fields = engine_fields(
        (request.body if changed else parsed.body) if parsed.json_body else None,
        changed,
        request.snapshot.config.engine.send_priority,
        request.tier_config.vllm_priority,
        parsed.body_priority,
    )
    if request.pool.name != DEFAULT_POOL:
        fields.headers[POOL_HEADER] = request.pool.name
    if request.reservation is not None and parsed.stream and parsed.usage_in_stream:
        # Envoy reads this stream's usage chunk as it passes (envoy.yaml's Lua filter).
        fields.headers[USAGE_HEADER] = "1"
    return fields


def _admit(
    request: RequestView,
    identity: Identity,
    engine: EngineFields | None = None,
    reason: str = "admitted",
    slot: str = "",
    waited: float | None = None,
    pool: Pool | None = None,
) -> Admit:
    extra = dict(engine.headers) if engine else {}
    if slot:
        extra |= {"x-qos-slot": slot, "x-qos-queue-wait-ms": f"{(waited or 0.0) * 1000:.0f}"}
    body = engine.body if engine else None
    admit = _tagged(request, identity.tier.value, identity.tenant_label, body, reason, extra)
    return dataclasses.replace(
        admit,
        slot=slot,
        queue_wait=waited if slot else None,
        reroute=POOL_HEADER in extra,
        pool=pool.name if pool else "",
    )


def _tagged(
    request: RequestView,
    tier: str,
    tenant: str,
    body: dict[str, Any] | None,
    reason: str,
    extra: dict[str, str] | None = None,
) -> Admit:
    """Admit with the sidecar's tags; internal headers and engine instructions a client
    sent never go upstream."""
    tags = {"x-qos-tier": tier, "x-qos-tenant": tenant, **(extra or {})}
    # Those seen, and the ones the sidecar's own machinery reads whether seen or not
    # (Envoy may show the sidecar only some headers: see messages.attribute_headers).
    present = (name for name in request.headers if name.startswith(INTERNAL_PREFIX))
    engine = client_control_headers(request.headers)
    stripped = dict.fromkeys(n for n in (*present, *LOGGED_HEADERS, *engine) if n not in tags)
    replacement = None
    if body is not None:
        replacement = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return Admit(
        set_headers=tags,
        remove_headers=tuple(stripped),
        replace_body=replacement,
        reason=reason,
        tier=tier,
    )


def _upgrades(request: RequestView) -> bool:
    """The request asks to switch protocols (a WebSocket, over HTTP/1.1 or HTTP/2)."""
    headers: Mapping[str, str] = request.headers
    return "upgrade" in headers or ":protocol" in headers or request.method == "CONNECT"


@contextlib.contextmanager
def _client_input(request: RequestView) -> Iterator[None]:
    """What a client sent and the sidecar cannot read is refused, never admitted: its
    reader's refusal, or any error reading it raised (counted, and logged as a bug)."""
    try:
        yield
    except InvalidRequest as error:
        raise Refusal(Reason.INVALID_REQUEST, error.message, param=error.param) from None
    except (Refusal, asyncio.CancelledError):
        raise
    except Exception:
        log.warning(
            "reading a request failed; refused", exc_info=True, extra={"path": request.path}
        )
        raise Refusal(
            Reason.INVALID_REQUEST, "The request body could not be read as this API's."
        ) from None
