"""What a request costs its budgets: reserved at admission, settled when it ends. Pure.

cost = prompt tokens * weight + output tokens * output_weight

At admission the output is not known: the request reserves the most it asked for, its
max_tokens (after the tier's cap), or the tier's expected_output_tokens when it set none.
When the exchange ends the real counts (the answer's usage, or an estimate) give the
real cost; the difference is given back to the buckets or taken from them (a debt).
Reserving what was asked for keeps a tenant to its rate even while its answers are
still being generated.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.config.schema import Tier, TierConfig
from sidecar.limiter.buckets import BucketSpec


@dataclass(frozen=True)
class Charge:
    prompt_tokens: int
    expected_output: int
    weight: float
    output_weight: float

    @property
    def reserved(self) -> float:
        return self.cost(self.prompt_tokens, self.expected_output)

    def cost(self, prompt_tokens: int, output_tokens: int) -> float:
        return prompt_tokens * self.weight + output_tokens * self.output_weight

    def difference(self, prompt_tokens: int | None, output_tokens: int) -> float:
        """Real cost minus the reservation: positive is owed, negative given back. A
        prompt count the answer did not give is taken as estimated."""
        prompt = self.prompt_tokens if prompt_tokens is None else prompt_tokens
        return self.cost(prompt, output_tokens) - self.reserved


def charge(tier: TierConfig, prompt_tokens: int, max_tokens: int | None) -> Charge:
    """The charge of a request of this tier, its prompt estimated at `prompt_tokens`."""
    asked = max_tokens if max_tokens is not None else tier.expected_output_tokens
    expected = min(asked, tier.max_tokens_cap) if tier.max_tokens_cap else asked
    return Charge(prompt_tokens, expected, tier.weight, tier.output_weight)


@dataclass(frozen=True)
class Reservation:
    """What an admitted request took from which buckets, to settle when it ends."""

    charge: Charge
    buckets: tuple[BucketSpec, ...]
    chat: bool  # a chat completion (else a text completion), for estimating the output
    model: str
    pool: str  # whose tier bucket comes first in `buckets`
    tier: Tier
