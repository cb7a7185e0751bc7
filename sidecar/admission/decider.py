"""Admission: identity → tier, body checks and guards, overload, budget, slot → decision.

route ─▶ identify ─▶ read the body ─▶ guards ─▶ overload shed? ─▶ budget (one Redis call)
                                                              │ short: wait for it, or shed
                                                              ▼
                                         slot free? ─▶ admit │ else wait in the queue

Beside it: budgets.py (the buckets a request is charged to), budget_wait.py (waiting
for a bucket to refill), tagging.py (what an admitted request carries upstream),
reading.py (what the client sent and the sidecar cannot read).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.admission.budget_wait import BudgetWaiters
from sidecar.admission.budgets import budget_buckets, budget_reason, too_big, waiting_key
from sidecar.admission.identity import Identity, IdentityResolver, Unauthenticated
from sidecar.admission.reading import client_input, upgrades
from sidecar.admission.tagging import POOL_HEADER, USAGE_HEADER, admit, tagged
from sidecar.bodies.parsed import ParsedRequest, ResponseShape, TextForm
from sidecar.bodies.read import read
from sidecar.config.pools import DEFAULT_POOL, Pool
from sidecar.config.schema import Mode, Tier, TierConfig
from sidecar.config.store import Snapshot
from sidecar.limiter.buckets import BucketSpec, Limiter, Owner, Verdict
from sidecar.limiter.resilient import LocalTokenBuckets
from sidecar.openai_api.prompt import TextCounter
from sidecar.overload.monitor import HeldAdmission
from sidecar.overload.shedding import SheddingState, overload_refusal
from sidecar.policy.cost import Charge, Reservation, charge, prompt_tokens
from sidecar.policy.decision import Admit, Decision, Final, Hold, RequestView, Respond
from sidecar.policy.engine import EngineFields, engine_fields
from sidecar.policy.guards import apply_guards
from sidecar.policy.refusals import Reason, Refusal
from sidecar.policy.responses import respond
from sidecar.queueing.queue import AdmissionQueue, QueueFull
from sidecar.routes.kinds import RouteKind

log = logging.getLogger(__name__)


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
        self._budget_waiters = BudgetWaiters(clock)
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
        rate = slo.ttft_samples_per_second
        budget = BucketSpec("ttft-samples", rate, rate, owner=Owner.SAMPLES)
        return self._watch_budget.acquire(1, [budget]).allowed

    async def decide(self, request: RequestView) -> Decision:
        snapshot = self._snapshot()
        decision = await self._decide(request, snapshot)
        if isinstance(decision, Respond) and snapshot.mode.mode is Mode.SHADOW:
            # Shadow: the decision is made and counted, the request goes through untouched.
            tier = Tier(decision.tier) if decision.tier else snapshot.config.identity.default_tier
            routed = decision.pool and decision.pool != DEFAULT_POOL
            route = {POOL_HEADER: decision.pool} if routed else {}
            shadow = tagged(request, tier.value, "shadow", None, f"shadow_{decision.reason}", route)
            return dataclasses.replace(shadow, pool=decision.pool, reroute=bool(routed))
        return decision

    async def _decide(self, request: RequestView, snapshot: Snapshot) -> Decision:
        shape: ResponseShape | None = None
        tier_config: TierConfig | None = None
        identity: Identity | None = None
        pool: Pool | None = None
        try:
            route = snapshot.routes.resolve(request.method, request.path, upgrades(request))
            shape = ResponseShape(route.kind.api)
            identity = await self._resolve(request, snapshot)
            tier_config = snapshot.config.tiers[identity.tier]
            if route.kind is RouteKind.PASS:
                return admit(request, identity)  # no GPU work: tagged, not charged
            if route.kind is RouteKind.REFUSE:
                raise Refusal(
                    Reason.ROUTE_NOT_FOUND,
                    f"This gateway serves no {request.method} {route.path}.",
                )
            with client_input(request):
                parsed = read(route, request.body or b"", request.headers)
            shape = parsed.shape
            pool = _pool(snapshot, parsed.model)
            tier_config = pool.tiers[identity.tier]
            with client_input(request):
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
        buckets = budget_buckets(request.snapshot, request.identity, request.pool, capacity)
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
        refused = verdict.refused or buckets[0]
        if verdict.retry_after is None:
            raise too_big(request.identity, cost, refused)
        if refused.owner is Owner.TENANT:
            raise Refusal(
                Reason.TENANT_RATE_LIMITED,
                f"Rate limit reached for tenant {request.identity.tenant_label}.",
                retry_after=verdict.retry_after,
            )
        if not request.tier_config.sheddable:
            _confirm(held, verdict.recorded_ms)
            return await self._take_slot(request, "admitted_over_budget")
        max_wait = request.tier_config.max_queue_wait_seconds
        waiting = waiting_key(refused)
        ahead = self._budget_waiters.ahead(waiting, refused.rate)
        if self._queue is not None and verdict.retry_after + ahead <= max_wait:
            return Hold(
                lambda: self._wait_for_budget(request, cost, waiting, buckets, verdict),
                max_wait,
                tier=request.tier.value,
            )
        return request.refuse(budget_reason(verdict))

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
        """The tier's bucket refills soon: wait for it, then for a slot, within max wait."""
        started = self._clock()
        deadline = started + request.tier_config.max_queue_wait_seconds

        async def ask() -> Verdict:
            held = self._hold(request)  # counts in the pool's load while it asks
            try:
                answer = await self._limiter.acquire(cost, buckets, held.load if held else None)
                if answer.allowed:
                    _confirm(held, answer.recorded_ms)
                return answer
            finally:
                if held is not None:
                    held.cancel()  # a no-op once confirmed

        verdict = await self._budget_waiters.wait(cost, key, verdict, deadline, ask)
        if not verdict.allowed:
            return request.refuse(budget_reason(verdict))
        request = _reserved(request, buckets)
        return await self._wait_for_slot(request, deadline - self._clock(), started)

    async def _take_slot(self, request: _Request, reason: str = "admitted") -> Decision:
        if self._queue is None:
            engine = _engine(request)
            return admit(request.view, request.identity, engine, reason, pool=request.pool)
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
        admitted = admit(
            request.view, request.identity, _engine(request), reason, slot, waited, request.pool
        )
        if request.parsed.stream and request.view.response_watched:
            # Time this stream's first token: its response body will be watched.
            return dataclasses.replace(admitted, time_first_byte=True)
        return admitted


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
    smallest = min(buckets, key=lambda bucket: bucket.burst)
    charge = dataclasses.replace(request.charge, ceiling=smallest.burst)
    if charge.prompt_cost > smallest.burst:
        raise too_big(request.identity, charge.prompt_cost, smallest)
    return dataclasses.replace(request, charge=charge)


def _confirm(held: HeldAdmission | None, recorded_ms: int) -> None:
    if held is not None:
        held.confirm(recorded_ms)


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
