"""What a request costs its budgets: reserved at admission, settled when it ends. Pure.

cost = prompt tokens * weight + output tokens * output_weight

At admission the output is not known: the request reserves the most it asked for, its
max_tokens (after the tier's cap), or the tier's expected_output_tokens when it set none,
but never more than its buckets can hold (the smallest burst): a tenant whose burst is
smaller than its usual max_tokens is still served. When the exchange ends the real
counts (the answer's usage, or an estimate) give the real cost; the difference is given
back to the buckets or taken from them (a debt, bounded by the tier's max_debt_seconds
of rate). Reserving what was asked for keeps a tenant to its rate even while its
answers are still being generated; the debt keeps it there when they cost more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sidecar.config.base import Tier
from sidecar.config.schema import MediaConfig, TierConfig
from sidecar.request.bodies.parsed import Media, OutputLimit, Prompt
from sidecar.request.limiter.buckets import BucketSpec


@dataclass(frozen=True)
class Charge:
    prompt_tokens: int
    expected_output: int
    weight: float
    output_weight: float
    # What the request's buckets hold at most: it reserves no more (None: not known yet),
    # and owes the rest of its real cost when it is settled.
    ceiling: float | None = None
    # Worked out once as it is made (a decision reads them several times):
    prompt_cost: float = field(init=False)
    asked: float = field(init=False)  # its prompt and the output it asked for, whole
    reserved: float = field(init=False)  # what it takes at admission: asked, within the ceiling

    def __post_init__(self) -> None:
        prompt_cost = self.prompt_tokens * self.weight
        asked = prompt_cost + self.expected_output * self.output_weight
        reserved = asked if self.ceiling is None else min(asked, self.ceiling)
        object.__setattr__(self, "prompt_cost", prompt_cost)
        object.__setattr__(self, "asked", asked)
        object.__setattr__(self, "reserved", reserved)

    def cost(self, prompt_tokens: int, output_tokens: int) -> float:
        return prompt_tokens * self.weight + output_tokens * self.output_weight

    def difference(self, prompt_tokens: int | None, output_tokens: int) -> float:
        """Real cost minus the reservation: positive is owed, negative given back. A
        prompt count the answer did not give is taken as estimated."""
        prompt = self.prompt_tokens if prompt_tokens is None else prompt_tokens
        return self.cost(prompt, output_tokens) - self.reserved


def prompt_tokens(prompt: Prompt, counted: int, media: MediaConfig) -> int:
    """The prompt's tokens: `counted` of its text (request/counting), media and stored
    context as configured."""
    tokens = counted
    if prompt.media:
        per_part = {
            Media.IMAGE: media.image_tokens,
            Media.IMAGE_LOW_DETAIL: media.image_low_detail_tokens,
            Media.AUDIO: media.audio_tokens,
            Media.VIDEO: media.video_tokens,
            Media.FILE: media.file_tokens,
        }
        tokens += sum(per_part[part] for part in prompt.media)
    if prompt.stored_context:
        tokens += media.stored_context_tokens
    if prompt.audio_bytes:
        tokens += math.ceil(prompt.audio_bytes / media.audio_bytes_per_token)
    return max(tokens, 1)


def price(tier: TierConfig, prompt_tokens: int, output: OutputLimit | None) -> Charge:
    """The charge of a request of this tier, its prompt estimated at `prompt_tokens`; a
    route that generates nothing (embeddings) reserves no output."""
    if output is None:
        return Charge(prompt_tokens, 0, tier.weight, tier.output_weight)
    asked = output.requested if output.requested is not None else tier.expected_output_tokens
    cap = tier.max_tokens_cap
    expected = max(1, min(asked, output.each_within(cap))) if cap else asked
    return Charge(prompt_tokens, expected * output.per_request, tier.weight, tier.output_weight)


@dataclass(frozen=True)
class Reservation:
    """What an admitted request took from which buckets, to settle when it ends."""

    charge: Charge
    buckets: tuple[BucketSpec, ...]
    chat: bool  # a chat completion (else a text completion), for estimating the output
    model: str
    pool: str  # whose tier bucket comes first in `buckets`
    tier: Tier
    # A stream of chat or completion chunks, whose size tells its output when its usage
    # does not come (sidecar/request/completion/usage.py).
    sized: bool = True
