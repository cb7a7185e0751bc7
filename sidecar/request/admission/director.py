"""Admission: the director names the stages a request goes through, in order, each one
call into a module of its own that returns a value the next stage takes. A refusal at
any stage is answered in one place (`Answering`), in the shape of the API the client
called, as far as the request is known by then.

    stage               module                 gives
    route               pricing.py             Route: what it is, as the model server routes it
    identify            identity.py            Identity: tenant and tier
    read and price      pricing.py             ParsedRequest; Placement in its own pool
    choose the pool     overflow.py            Places: its own pool, then where it may overflow
    overload            overload.py            Places: those that do not shed it for load
    budget              budget.py              Budgeted: where its cost was taken, what it waits for
    wait                queueing/waiting.py    Turn: its slot, how long it waited
    answer              answer.py              Admit: what Envoy changes, the admission's record
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable

from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode
from sidecar.config.pools import Pool
from sidecar.config.store import Snapshot
from sidecar.loops.overload.shedding import SheddingState
from sidecar.refusals import Reason, Refusal
from sidecar.request.admission.answer import admitted, passed, shadowed
from sidecar.request.admission.budget import Budget, Projection
from sidecar.request.admission.identity import Identity, IdentityResolver, Unauthenticated
from sidecar.request.admission.overflow import choose_pools
from sidecar.request.admission.overload import Overload
from sidecar.request.admission.pricing import Pricing, pool_for, read_body, route_of
from sidecar.request.admission.refunds import Refunds
from sidecar.request.admission.sampling import ResponseSampler
from sidecar.request.bodies.parsed import ResponseShape
from sidecar.request.counting import PromptCounter
from sidecar.request.limiter.buckets import Limiter
from sidecar.request.policy.decision import Decision, Hold, RequestView, Respond, no_hold
from sidecar.request.policy.responses import respond
from sidecar.request.policy.stages import staged
from sidecar.request.queueing.first_token import FirstTokenForecaster
from sidecar.request.queueing.queue import AdmissionQueue
from sidecar.request.queueing.waiting import Waiting
from sidecar.routes.kinds import RouteKind


class AdmissionDirector:
    def __init__(
        self,
        snapshot: Callable[[], Snapshot],  # the configuration in force
        identity: IdentityResolver,
        limiter: Limiter,
        count_prompt: PromptCounter,
        shedding: Callable[[], SheddingState] = SheddingState,
        queue: AdmissionQueue | None = None,  # None: no concurrency limit, nobody waits
        clock: Callable[[], float] = time.monotonic,
        sample: Callable[[], float] = random.random,
        projection: Projection | None = None,  # admissions' load before pods report it
        refunds: Refunds | None = None,  # budget given back (shared with the exchange ends)
    ) -> None:
        refunds = refunds if refunds is not None else Refunds(limiter)
        self._snapshot = snapshot
        self._identity = identity
        self._sampler = ResponseSampler(snapshot, clock, sample)
        first_tokens = FirstTokenForecaster(queue, shedding) if queue is not None else None
        self._pricing = Pricing(count_prompt, first_tokens)
        self._overload = Overload(shedding)
        self._waiting = Waiting(queue, refunds.give_all_back, clock, first_tokens)
        self._budget = Budget(
            limiter, refunds.levels, shedding, projection, self._waiting.lines, clock
        )

    def watch_response(self) -> bool:
        return self._sampler.watch()

    async def decide(self, request: RequestView, hold: Hold = no_hold) -> Decision:
        snapshot = self._snapshot()
        decision = await self._admit(request, snapshot, hold)
        if isinstance(decision, Respond) and snapshot.mode.mode is Mode.SHADOW:
            return shadowed(request, decision, snapshot.config.identity.default_tier.value)
        return decision

    async def _admit(self, request: RequestView, snapshot: Snapshot, hold: Hold) -> Decision:
        answer = Answering(snapshot)  # what a refusal is answered with, as it is learnt
        try:
            route = route_of(request, snapshot)  # what it is, as the model server routes it
            answer.shape, answer.route = ResponseShape(route.kind.api), route.kind.value
            identity = staged("identified", await self._identify(request, snapshot))  # its tier
            answer.identity = identity
            if route.kind is RouteKind.PASS:
                return passed(request, identity)  # no GPU work: tagged, not charged
            parsed = read_body(request, route)  # read, within the body limits
            answer.shape = parsed.shape
            answer.pool = home = pool_for(snapshot, parsed.model)  # the pool of its model
            place = staged("priced", self._pricing.price(request, snapshot, identity, parsed, home))
            places = choose_pools(place)  # its own pool, then those its tier overflows to
            places = staged("load checked", self._overload.admissible(places))  # shed where?
            budgeted = staged("budget taken", await self._budget.take(places))  # Redis, or headroom
            answer.pool = budgeted.place.pool
            turn = staged("slot taken", await self._waiting.turn(budgeted.wait, hold))  # waits?
            return admitted(budgeted, turn)  # tagged and scheduled by its tier
        except Refusal as refusal:
            return answer.refused(refusal)

    async def _identify(self, request: RequestView, snapshot: Snapshot) -> Identity:
        try:
            return await self._identity.resolve(request.headers, snapshot)
        except Unauthenticated:
            raise Refusal(
                Reason.UNAUTHENTICATED,
                "A valid API key is required: send it as 'Authorization: Bearer <key>'.",
            ) from None


class Answering:
    """How a refusal is answered: in the shape of the client's API, with its tier's
    fallback where it is shed, as far as each is known when it is refused."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self.shape: ResponseShape | None = None
        self.identity: Identity | None = None
        self.pool: Pool | None = None
        self.route = ""

    def refused(self, refusal: Refusal) -> Respond:
        tier: Tier | None = self.identity.tier if self.identity is not None else None
        if tier is None or self.identity is None:
            return dataclasses.replace(respond(refusal, self.shape, None), route=self.route)
        tiers = self.pool.tiers if self.pool is not None else self._snapshot.config.tiers
        answer = respond(refusal, self.shape, tiers[tier], tier.value)
        pool = self.pool.name if self.pool is not None else ""
        return dataclasses.replace(
            answer, pool=pool, tenant=self.identity.tenant_label, route=self.route
        )
