"""Model pools: which pool serves a request's model, and each pool's settings in force.

A pool is a set of GPUs serving some models behind the one gateway, with its own load,
capacity and budgets. The configuration's `pools.NAME` names the models it serves and
may change, for that pool, the top-level fleet figures, any tier setting and the SLO
targets; what it leaves out is the top-level value. Every pool is resolved once per
configuration version into a `Pool`, and a request carries its `Pool` from then on.

With no `pools` configured there is one pool, "default", serving every model with the
top-level settings: today's single fleet. With pools, a model no pool names goes to the
pool named "default" if there is one; otherwise it is unknown (404 model_not_found).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from sidecar.config.base import Tier
from sidecar.config.extras import ExtrasConfig
from sidecar.config.template import TemplateConfig

if TYPE_CHECKING:
    from sidecar.config.schema import FleetConfig, QosConfig, TiersConfig
    from sidecar.config.slo_config import TierSlos

DEFAULT_POOL = "default"


@dataclass(frozen=True)
class Pool:
    name: str
    models: frozenset[str]  # empty: the pool takes every model no other pool names
    fleet: FleetConfig  # its capacity and max concurrency
    tiers: TiersConfig  # its tiers' settings (shares, thresholds, caps...)
    slo: TierSlos  # its tiers' SLO targets
    # The model a request overflowing to the pool is rewritten to (its first named).
    model: str = ""
    max_model_len: int | None = None  # the longest context its model takes
    # What its model's chat template renders, where templates differ.
    template: TemplateConfig = field(default_factory=TemplateConfig)
    # The request fields beyond a prompt of text it takes (config/extras.py).
    extras: ExtrasConfig = field(default_factory=ExtrasConfig)

    # The configured figure; pods that report their own capacity override it.
    capacity_tokens_per_second: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "capacity_tokens_per_second", self.fleet.capacity_tokens_per_second
        )


class PoolsInvalid(ValueError):
    """A pool's settings do not validate, or two pools claim one model."""


@dataclass(frozen=True)
class Pools:
    """The pools of one configuration version, by name and by model."""

    by_name: Mapping[str, Pool]
    by_model: Mapping[str, Pool] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Pool]:
        return iter(self.by_name.values())

    @property
    def default(self) -> Pool:
        """The pool of an unpooled configuration (and the catch-all of a pooled one), or
        the first pool when none is named default."""
        return self.by_name.get(DEFAULT_POOL) or next(iter(self.by_name.values()))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.by_name)

    def get(self, name: str) -> Pool | None:
        return self.by_name.get(name)

    def for_model(self, model: str | None) -> Pool | None:
        """The pool that serves `model`; None when no pool does."""
        if model is not None and model in self.by_model:
            return self.by_model[model]
        return self.by_name.get(DEFAULT_POOL)


def resolve(config: QosConfig) -> Pools:
    """Every pool's settings in force; raises PoolsInvalid naming the key at fault."""
    from sidecar.config.schema import TiersConfig
    from sidecar.config.slo_config import TierSlos, shares_within_bounds

    if not config.pools:
        if any(config.tiers[tier].overflow for tier in Tier):
            raise PoolsInvalid("tiers.*.overflow: name pools to overflow to under pools")
        pool = Pool(
            DEFAULT_POOL,
            frozenset(),
            config.fleet,
            config.tiers,
            config.slo.targets,
            template=config.template,
            extras=config.extras,
        )
        return Pools({DEFAULT_POOL: pool})
    by_name: dict[str, Pool] = {}
    by_model: dict[str, Pool] = {}
    for name, settings in config.pools.items():
        where = f"pools.{name}"
        if not settings.models and name != DEFAULT_POOL:
            raise PoolsInvalid(f"{where}.models: name at least one model (only 'default' may not)")
        fleet = config.fleet.model_copy(
            update={
                key: value
                for key, value in (
                    ("capacity_tokens_per_second", settings.capacity_tokens_per_second),
                    ("max_concurrency", settings.max_concurrency),
                )
                if value is not None
            }
        )
        tiers = _over(TiersConfig, config.tiers, settings.tiers, f"{where}.tiers")
        slo = _over(TierSlos, config.slo.targets, settings.slo_targets, f"{where}.slo_targets")
        shares_within_bounds(tiers, config.controller, f"{where}.tiers")
        first = settings.models[0] if settings.models else ""
        unrendered = settings.template_unrendered
        template = config.template if unrendered is None else TemplateConfig(unrendered=unrendered)
        pool = Pool(
            name,
            frozenset(settings.models),
            fleet,
            tiers,
            slo,
            first,
            settings.max_model_len,
            template,
            config.extras if settings.extras is None else settings.extras,
        )
        by_name[name] = pool
        for model in settings.models:
            other = by_model.get(model)
            if other is not None:
                raise PoolsInvalid(
                    f"{where}.models: model {model!r} is claimed by pools {other.name!r} "
                    f"and {name!r}; a model belongs to one pool"
                )
            by_model[model] = pool
    for pool in by_name.values():
        _check_overflow(pool, by_name)
    return Pools(by_name, by_model)


def _check_overflow(pool: Pool, pools: Mapping[str, Pool]) -> None:
    """Each pool a tier overflows to exists, is another pool, and says its model and the
    context that model takes."""
    for tier in Tier:
        for name in pool.tiers[tier].overflow:
            where = f"pools.{pool.name}.tiers.{tier.value}.overflow"
            target = pools.get(name)
            if target is None:
                raise PoolsInvalid(f"{where}: no pool is named {name!r}")
            if target is pool:
                raise PoolsInvalid(f"{where}: a pool does not overflow to itself")
            if not target.model or target.max_model_len is None:
                raise PoolsInvalid(
                    f"{where}: pool {name!r} needs models and max_model_len to take overflow"
                )


def _over(
    kind: type[BaseModel], base: Any, changes: Mapping[Any, Mapping[str, Any]], where: str
) -> Any:
    """`base` with a pool's changes laid over it, validated as `kind`."""
    merged = base.model_dump(mode="json")
    for tier, keys in changes.items():
        merged[str(tier)] = {**merged[str(tier)], **keys}
    try:
        return kind.model_validate(merged)
    except ValidationError as error:
        problem = error.errors()[0]
        key = ".".join(str(part) for part in problem["loc"])
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown key"
        raise PoolsInvalid(f"{where}.{key}: {message}" if key else f"{where}: {message}") from None
