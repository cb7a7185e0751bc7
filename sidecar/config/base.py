"""The configuration schema's building blocks: the tiers, strict models, the number
types, pool names, and how a validation error is told."""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class Tier(enum.StrEnum):
    P0 = "p0"
    P1 = "p1"
    P2 = "p2"


TIERS = tuple(Tier)  # in order, P0 first: iterating the enum class itself costs more


class FallbackKind(enum.StrEnum):
    COMPLETION = "completion"  # HTTP 200, an answer saying "retry later"
    ERROR = "error"  # HTTP 429, an OpenAI error object


class Strict(BaseModel):
    # Numbers are finite: an infinity would be stored as null, a document no reader takes.
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )


Positive = Annotated[float, Field(gt=0)]
Share = Annotated[float, Field(gt=0, le=1)]
Fraction = Annotated[float, Field(ge=0, le=1)]

PoolName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]


def describe(error: ValidationError) -> str:
    """One line per problem, naming the key: `tiers.p2.share: Input should be ...`."""
    lines = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "(config)"
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{where}: {message}")
    return "\n".join(lines)


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
