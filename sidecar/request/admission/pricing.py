"""Price: the request as its own pool takes it. Its prompt's tokens; the fields beyond a
prompt of text its pool takes (policy/extras.py); the tier's guards (an output cap
written into the body, a prompt too long refused); what it costs (policy/cost.py); and
how long it may wait there, as waiting decides it (queueing/waiting.py)."""

from __future__ import annotations

from sidecar.config.pools import Pool
from sidecar.request.admission.reading import unreadable
from sidecar.request.admission.request import Placement, Request
from sidecar.request.bodies.extras import extras_tokens
from sidecar.request.counting import PromptCounter
from sidecar.request.policy.cost import price, prompt_tokens
from sidecar.request.policy.guards import apply_guards
from sidecar.request.queueing.waiting import Waiting


class Pricing:
    def __init__(self, count: PromptCounter, waiting: Waiting) -> None:
        self._count = count
        self._waiting = waiting  # how long a request may wait is waiting's to say

    def price(self, request: Request, pool: Pool) -> Placement:
        parsed, tier = request.parsed, request.identity.tier
        settings = pool.tiers[tier]
        try:
            extra = extras_tokens(parsed.extras, pool.extras, parsed.model)
            counted = self._count(parsed, pool.template.unrendered) + extra
            tokens = prompt_tokens(parsed.prompt, counted, request.snapshot.config.media)
            guarded = apply_guards(parsed, settings, tier.value, tokens)
            charge = price(settings, tokens, parsed.output)
        except Exception as error:
            raise unreadable(error, request.view.path) from None
        patience = self._waiting.patience(
            request.view,
            pool,
            tier,
            settings,
            charge.asked,
            parsed.stream,
            request.shedding,
            request.snapshot.config.queue,
        )
        return Placement(
            request,
            tier,
            pool,
            settings,
            guarded,
            charge,
            patience.max_wait,
            first_token=patience.first_token,
        )
