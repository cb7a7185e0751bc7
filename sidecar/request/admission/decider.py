"""Admission: identity → tier, body checks and guards, overload, budget, slot → decision.

route ─▶ identify ─▶ read the body ─▶ guards ─▶ overload shed? ─▶ budget (one Redis call;
                                                              │ none while others wait for
                                                              │ it: join them, or shed)
                                                              ▼
                                         slot free? ─▶ admit │ else wait in the queue

Beside it: request.py (the request as it goes through), budgets.py (the buckets it is
charged to), budget_wait.py (waiting in line for a bucket to refill: budget_line.py,
budget_cutoff.py), slot_wait.py (taking a slot
or waiting for one), patience.py (how long it may wait), refunds.py (budget given back),
tagging.py (what an admitted request carries upstream), reading.py (what the client sent
and the sidecar cannot read), sampling.py (which responses are timed).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable
from typing import Protocol

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.budget_layout import AdmittedLoad
from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode
from sidecar.config.pools import Pool
from sidecar.config.schema import TierConfig
from sidecar.config.store import Snapshot
from sidecar.loops.overload.admitted import ProjectedAdmission
from sidecar.loops.overload.shedding import SheddingState, overload_refusal
from sidecar.refusals import Reason, Refusal
from sidecar.request.admission.budget_wait import BudgetWait
from sidecar.request.admission.budgets import budget_buckets, budget_refusal
from sidecar.request.admission.identity import Identity, IdentityResolver, Unauthenticated
from sidecar.request.admission.offer import Offer, offer
from sidecar.request.admission.overflow import elsewhere, marked, substitute_allowed
from sidecar.request.admission.patience import max_wait, target_leaves
from sidecar.request.admission.reading import client_input, upgrades
from sidecar.request.admission.refunds import BucketLevels, Refunds
from sidecar.request.admission.request import AdmissionRequest, charged, pool_for
from sidecar.request.admission.sampling import ResponseSampler
from sidecar.request.admission.slot_wait import SlotWait
from sidecar.request.admission.tagging import admit, shadowed
from sidecar.request.bodies.parsed import ResponseShape
from sidecar.request.bodies.read import read
from sidecar.request.limiter.buckets import BucketSpec, Limiter, Owner, Verdict
from sidecar.request.openai_api.prompt import TextCounter
from sidecar.request.policy.cost import price, prompt_tokens
from sidecar.request.policy.decision import (
    Admitted,
    Decision,
    RequestView,
    Respond,
)
from sidecar.request.policy.guards import apply_guards
from sidecar.request.policy.responses import respond
from sidecar.request.queueing.queue import AdmissionQueue
from sidecar.routes.kinds import RouteKind

log = logging.getLogger(__name__)


class Projection(Protocol):
    def project(
        self, tier: Tier, pool: Pool, prompt_tokens: int, even_over_budget: bool
    ) -> ProjectedAdmission | None: ...


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
        self._sampler = ResponseSampler(snapshot, clock, sample)
        self.bucket_levels: BucketLevels = {}
        self._refunds = Refunds(limiter, self.bucket_levels)
        self.give_back = self._refunds.give_back
        self._slots = SlotWait(queue, self._refunds, clock)
        self._budget = BudgetWait(self._ask_budget, self._slots, clock)

    def watch_response(self) -> bool:
        return self._sampler.watch()

    async def decide(self, request: RequestView) -> Decision:
        snapshot = self._snapshot()
        decision = await self._decide(request, snapshot)
        if isinstance(decision, Respond) and snapshot.mode.mode is Mode.SHADOW:
            return shadowed(request, decision, snapshot.config.identity.default_tier.value)
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
            pool = pool_for(snapshot, parsed.model)
            tier_config = pool.tiers[identity.tier]
            with client_input(request):
                tokens = prompt_tokens(parsed.prompt, self._count_text, snapshot.config.media)
                guarded = apply_guards(parsed, tier_config, identity.tier.value, tokens)
                cost = price(tier_config, tokens, parsed.output)
            leaves = None
            if self._queue is not None and parsed.stream:
                leaves = target_leaves(self._queue.first_tokens, snapshot, identity.tier, pool)
            wait = max_wait(request.headers, tier_config, leaves)
            substitute = substitute_allowed(request.headers)
            admission = AdmissionRequest(
                request, snapshot, identity, parsed, guarded, pool, cost, wait, None, substitute
            )
            return await self._admit_here_or_elsewhere(admission)
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

    async def _admit_here_or_elsewhere(self, request: AdmissionRequest) -> Decision:
        """In its own pool, or shed there for its pool's sake, in the first pool its tier
        overflows to that admits it (overflow.py; the first offered in the same budget
        call: offer.py); else its own pool's answer."""
        refused_there: set[str] = set()  # pools whose budgets said no in the same call
        decision = await self._admit_completion(request, refused_there)
        if not isinstance(decision, Respond):
            return decision
        for moved in elsewhere(request, decision.reason):
            if moved.pool.name in refused_there:
                continue
            try:
                there = await self._admit_completion(moved)
            except Refusal:
                continue  # refused there for that pool's own limits: no better
            if not isinstance(there, Respond):
                return marked(there, moved)
        return decision

    async def _admit_completion(
        self, request: AdmissionRequest, refused_there: set[str] | None = None
    ) -> Decision:
        pool_state = self._shedding().for_pool(request.pool.name)
        overload = overload_refusal(request.tier, request.snapshot, pool_state)
        if overload is not None:  # decided without Redis
            return request.refuse(overload)
        capacity = pool_state.capacity(request.pool)  # follows the pods that say theirs
        buckets = budget_buckets(request.snapshot, request.identity, request.pool, capacity)
        request = request.within(buckets)
        projected = self._project(request)  # counts in the pool's load until confirmed or not
        try:
            decision = await self._take_budget(request, buckets, projected, refused_there)
            return charged(decision, request)
        finally:
            if projected is not None:
                projected.cancel()  # not admitted (a no-op when it was confirmed)

    async def _take_budget(
        self,
        request: AdmissionRequest,
        buckets: list[BucketSpec],
        projected: ProjectedAdmission | None,
        refused_there: set[str] | None = None,
    ) -> Decision:
        """Take the request's cost from its budgets (one Redis call; or, when they would
        shed it, from another pool's offered in the same call: offer.py; a pool that
        refused it there too is added to `refused_there`), then a slot."""
        if self._queue is not None and request.tier_config.sheddable:
            behind = self._budget.behind_others(request, buckets)
            if behind is not None:
                return behind
        cost = request.charge.reserved
        offered = None
        if refused_there is not None and self._queue is not None:
            offered = offer(request, self._shedding(), self.bucket_levels, self._project)
        otherwise = offered.alternative(request.max_wait) if offered is not None else None
        try:
            verdict = await self._limiter.acquire(cost, buckets, _load_of(projected), otherwise)
            if offered is not None and refused_there is not None:
                if verdict.elsewhere:
                    return await self._taken_elsewhere(offered, verdict)
                if verdict.elsewhere is False:
                    refused_there.add(offered.request.pool.name)
            self.bucket_levels[request.pool.name, request.tier] = verdict.remaining
        except redis.RedisError as error:
            redis_errors.note("limiter")
            # Budgets are shared through Redis; without it, admit rather than refuse all.
            log.warning("limiter unavailable, admitting: %s", error)
            _confirm(projected, recorded_ms=0)
            return await self._slots.take(request, Admitted.LIMITER_UNAVAILABLE)
        finally:
            if offered is not None:
                offered.cancel()  # not taken (a no-op when it was)
        if verdict.allowed:
            _confirm(projected, verdict.recorded_ms)
            return await self._slots.take(request.reserved(buckets))
        if verdict.retry_after is not None and _short_of_tier_budget(verdict):
            if not request.tier_config.sheddable:
                _confirm(projected, verdict.recorded_ms)
                return await self._slots.take(request, Admitted.OVER_BUDGET)
            if self._queue is not None and verdict.retry_after <= request.max_wait:
                return self._budget.hold(request, buckets, verdict, verdict.retry_after)
        return request.answer(budget_refusal(request.identity, cost, verdict, buckets[0]))

    async def _taken_elsewhere(self, offered: Offer, verdict: Verdict) -> Decision:
        """Admitted by the offer's budgets in the same call: a slot in its pool."""
        moved = offered.request
        self.bucket_levels[moved.pool.name, moved.tier] = verdict.remaining
        _confirm(offered.projected, verdict.recorded_ms)
        decision = await self._slots.take(moved.reserved(offered.buckets))
        return marked(charged(decision, moved), moved)

    def _project(self, request: AdmissionRequest) -> ProjectedAdmission | None:
        if self._projection is None:
            return None
        return self._projection.project(
            request.tier,
            request.pool,
            request.charge.prompt_tokens,
            even_over_budget=not request.tier_config.sheddable,
        )

    async def _ask_budget(self, request: AdmissionRequest, buckets: list[BucketSpec]) -> Verdict:
        """One budget call for a waiter, counted in its pool's load while it asks."""
        projected = self._project(request)
        try:
            answer = await self._limiter.acquire(
                request.charge.reserved, buckets, _load_of(projected)
            )
            if answer.allowed:
                _confirm(projected, answer.recorded_ms)
            return answer
        finally:
            if projected is not None:
                projected.cancel()  # a no-op once confirmed


def _confirm(projected: ProjectedAdmission | None, recorded_ms: int) -> None:
    if projected is not None:
        projected.confirm(recorded_ms)


def _short_of_tier_budget(verdict: Verdict) -> bool:
    return verdict.refused is None or verdict.refused.owner is Owner.TIER


def _load_of(projected: ProjectedAdmission | None) -> AdmittedLoad | None:
    return projected.load if projected is not None else None
