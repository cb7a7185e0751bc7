"""Admission: the director names the stages a request goes through, in order, each one
call into a module of its own that returns a value the next stage takes. A refusal at
any stage is answered in one place (answers/refusal.py), in the shape of the API the
client called, as far as the request is known by then.

    stage               module                 gives
    route               reading.py             Route: what it is, as the model server routes it
    identify            identity.py            Identity: tenant and tier
    read                reading.py             ParsedRequest, and the pool of its model
    price               pricing.py             Placement in its own pool: charge, longest wait
    candidates          candidates.py          Candidates: its own pool, then where it may
                                               overflow, less those shedding it for load
    budget              budget.py              Budgeted: where its cost was taken, what it waits for
    wait                queueing/waiting.py    Turn: its slot, how long it waited
    answer              answer.py              Admit: what Envoy changes, the admission's record

The state a decision reads (the configuration in force, the pools' shedding) is read once
as it begins and carried in its `Request`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

from sidecar.config.operator_state import Mode
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.shedding import SheddingState
from sidecar.refusals import Reason, Refusal
from sidecar.request.admission.answer import admitted, passed, shadowed
from sidecar.request.admission.budget import Budget, Projection
from sidecar.request.admission.candidates import admissible, choose_pools, substitute_allowed
from sidecar.request.admission.identity import Identity, IdentityResolver, Unauthenticated
from sidecar.request.admission.pricing import Pricing
from sidecar.request.admission.reading import pool_for, read_body, route_of
from sidecar.request.admission.refunds import Refunds
from sidecar.request.admission.request import Request
from sidecar.request.admission.sampling import ResponseSampler
from sidecar.request.answers.refusal import RefusalAnswer
from sidecar.request.bodies.parsed import ResponseShape
from sidecar.request.counting import PromptCounter
from sidecar.request.extproc.tracing import span_event
from sidecar.request.limiter.buckets import Limiter
from sidecar.request.policy.decision import (
    UNWATCHED,
    Decision,
    Hold,
    RequestView,
    Respond,
    ResponseWatch,
    no_hold,
)
from sidecar.request.queueing.waiting import AdmissionQueue, Waiting
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
        self._shedding = shedding
        self._identity = identity
        # Whether to time a request's first token, asked at its headers: the sampler's.
        self._sampled = ResponseSampler(snapshot, clock, sample).watch
        self._waiting = Waiting(queue, refunds.give_all_back, clock, shedding)
        self._pricing = Pricing(count_prompt, self._waiting)
        self._budget = Budget(limiter, refunds.levels, projection, self._waiting, clock)

    def watch_response(self, headers: Mapping[str, str]) -> ResponseWatch:
        """A sample of the responses, timed; and with eviction on, every response whose
        tier's streams may be ended early, as far as its tier is known from its headers."""
        snapshot = self._snapshot()
        evictable = False
        if snapshot.config.overload.evict_below_free_kv is not None:
            tier = self._identity.known_tier(headers, snapshot)
            evictable = tier is not None and snapshot.config.tiers[tier].evictable
        sampled = self._sampled()
        return ResponseWatch(sampled, evictable) if sampled or evictable else UNWATCHED

    async def decide(self, request: RequestView, hold: Hold = no_hold) -> Decision:
        snapshot = self._snapshot()
        decision = await self._admit(request, snapshot, hold)
        if isinstance(decision, Respond) and snapshot.mode.mode is Mode.SHADOW:
            return shadowed(request, decision, snapshot.config.identity.default_tier.value)
        return decision

    async def _admit(self, view: RequestView, snapshot: Snapshot, hold: Hold) -> Decision:
        answer = RefusalAnswer(snapshot.config.tiers)  # a refusal's answer, as it is learnt
        try:
            route = route_of(view, snapshot)  # what it is, as the model server routes it
            answer.shape, answer.route = ResponseShape(route.kind.api), route.kind.value
            identity = span_event("identified", await self._identify(view, snapshot))
            answer.tier, answer.tenant = identity.tier, identity.tenant_label
            if route.kind is RouteKind.PASS:
                return passed(view, identity)  # no GPU work: tagged, not charged
            parsed = read_body(view, route)  # read, within the body limits
            answer.shape = parsed.shape
            answer.pool = home = pool_for(snapshot, parsed.model)  # the pool of its model
            substitute = substitute_allowed(view.headers)  # may another pool's model answer?
            request = Request(view, snapshot, self._shedding(), identity, parsed, substitute)
            place = span_event("priced", self._pricing.price(request, home))  # cost, patience
            candidates = admissible(choose_pools(place))  # where, less those shedding it
            candidates = span_event("load checked", candidates)
            budgeted = span_event("budget taken", await self._budget.take(candidates))
            answer.pool = budgeted.place.pool
            turn = span_event("slot taken", await self._waiting.turn(budgeted.wait, hold))
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
