"""The QoS configuration kept in Redis: its schema, its validation, its defaults.

Every model forbids unknown keys, so a typo is refused with its name instead of being
ignored. Defaults are the product brief's: P0 60 %, P1 35 %, P2 5 % of the fleet's
token rate, bursts of 0.5 s of rate. The building blocks are in base.py, the SLO and
controller sections in slo_config.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from sidecar.config.base import (
    FallbackKind,
    Fraction,
    PoolName,
    Positive,
    Share,
    Strict,
    Tier,
    deep_merge,
)
from sidecar.config.extras import ExtrasConfig
from sidecar.config.slo_config import ControllerConfig, SloConfig, shares_within_bounds
from sidecar.config.template import TemplateConfig, TemplateField

DEFAULT_MESSAGE = (
    "We are serving many users right now. Your place is kept: please retry in {retry_after} s."
)


class TierConfig(Strict):
    # Its share of the fleet's token rate (the three add up to 1 at most).
    share: Share
    # What a prompt token costs the tier's budgets.
    weight: Positive = 1.0
    # What an output token costs (0: only the prompt is charged, as before output was).
    # A request reserves its expected output at admission; the answer's real count
    # settles the difference when the exchange ends.
    output_weight: Annotated[float, Field(ge=0)] = 0.0
    # The output reserved when the client sets no max_tokens (else its max_tokens is).
    expected_output_tokens: Annotated[int, Field(ge=1)] = 256
    # Its bucket's size, in seconds of its rate.
    burst_seconds: Positive = 0.5
    # A request reserves at most what its buckets hold; what its answer cost beyond that
    # is owed after it, as a debt of at most this many seconds of the bucket's rate.
    max_debt_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0
    # The most output a request may ask for: its max_tokens (or the API's name for it) is
    # written down to this in the body forwarded.
    max_tokens_cap: Annotated[int, Field(ge=1)] | None = None
    # Longer prompts are refused (400 prompt_too_long).
    max_prompt_tokens: Annotated[int, Field(ge=1)] | None = None
    # Whether an exhausted budget sheds this tier. P0 is never shed for budget: it is
    # admitted over budget and counted (the concurrency guard still bounds it).
    sheddable: bool = True
    # Its running streams may be ended early, well-formed, when the tiers above need
    # their GPUs' memory (overload.evict_below_free_kv). Never P0.
    evictable: bool = False
    # Overload: shed the tier while the cluster's free KV-cache ratio is below this...
    shed_below_free_kv: Fraction | None = None
    # ...or while requests in flight exceed this fraction of fleet.max_concurrency.
    shed_above_inflight: Fraction | None = None
    # Queueing: how long a request may wait for a slot or for budget before it gets the
    # fallback (within Envoy's max_message_timeout of 30 s), and how many may wait.
    max_queue_wait_seconds: Annotated[float, Field(ge=0, le=25)] = 2.0
    # Waiters of the tier per sidecar, at most; past it a newcomer gets the fallback.
    max_queue_length: Annotated[int, Field(ge=0)] = 200
    # The `priority` written into the body for vLLM's priority scheduling (lower first).
    vllm_priority: int = 0
    # What a shed request gets: an answer in the API's shape with the message, or a 429.
    fallback: FallbackKind = FallbackKind.COMPLETION
    # The shed answer's text; may contain {retry_after}.
    fallback_message: Annotated[str, Field(min_length=1, max_length=1000)] = DEFAULT_MESSAGE
    # The longest Retry-After of the tier's sheds: each says when the gateway foresees
    # the tier admitted again (the queue's or the bucket's line drained, the watermark
    # recovered, the bucket refilled), and this where nothing is foreseen (core-only,
    # forced, no reports).
    retry_after_seconds: Annotated[int, Field(ge=1, le=3600)] = 15
    # Pools that serve the tier's requests its own pool sheds for load or for this tier's
    # budget, tried in order: the request goes to the first that admits it, its `model`
    # rewritten to that pool's first model (set per pool: pools.NAME.tiers.pN.overflow;
    # each pool named needs max_model_len). Empty: shed as usual.
    overflow: tuple[PoolName, ...] = ()

    @field_validator("fallback_message")
    @classmethod
    def _message_formats(cls, message: str) -> str:
        try:
            message.format(retry_after=15)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"may contain {{retry_after}} and no other {{placeholder}} ({exc!r})"
            ) from None
        return message

    def message(self, retry_after: int | None = None) -> str:
        """The fallback's text, saying when to retry (whole seconds; default the most)."""
        seconds = self.retry_after_seconds if retry_after is None else retry_after
        return self.fallback_message.format(retry_after=seconds)


class TiersConfig(Strict):
    p0: TierConfig = TierConfig(
        share=0.60,
        max_tokens_cap=512,
        max_prompt_tokens=4096,
        sheddable=False,
        max_queue_wait_seconds=10.0,
        max_queue_length=1000,
        vllm_priority=0,
    )
    p1: TierConfig = TierConfig(
        share=0.35,
        shed_below_free_kv=0.08,
        max_queue_wait_seconds=5.0,
        max_queue_length=500,
        vllm_priority=1,
    )
    p2: TierConfig = TierConfig(
        share=0.05,
        evictable=True,
        shed_below_free_kv=0.15,
        shed_above_inflight=0.80,
        max_queue_wait_seconds=2.0,
        max_queue_length=200,
        vllm_priority=2,
    )

    if TYPE_CHECKING:

        def __getitem__(self, tier: Tier) -> TierConfig: ...

    else:
        # The field by name, looked up in C: a StrEnum member is its value. Read on every
        # decision, and no Python frame this way.
        __getitem__ = object.__getattribute__

    @model_validator(mode="after")
    def _shares_fit_the_fleet(self) -> TiersConfig:
        total = self.p0.share + self.p1.share + self.p2.share
        if total > 1.0 + 1e-9:
            raise ValueError(
                f"tier shares add up to {total:.4g}; they split the fleet and may not pass 1"
            )
        if self.p0.evictable:
            raise ValueError("tiers.p0.evictable: P0's streams are never ended early")
        return self


class FleetConfig(Strict):
    # What the GPUs behind this gateway can prefill, in input tokens a second.
    capacity_tokens_per_second: Positive = 50_000.0
    # In-flight requests the fleet takes at most (all tiers).
    max_concurrency: Annotated[int, Field(ge=1)] = 256
    # While every pod of a pool holds requests waiting and the requests held there grow
    # (its engines serve less than they are sent), what its answers cost its budgets a
    # second (settled from their usage) is its capacity as it is now: in force, for its
    # budgets and forecasts, when less than the figure above (or its pods' own), and for
    # 30 s after, lest the queue it drained fill again at once. false: the figure alone.
    follow_served_capacity: bool = True


class IdentityConfig(Strict):
    # Where a request's tenant comes from, tried in this order.
    sources: tuple[Literal["api_key", "header"], ...] = ("api_key",)
    # A header set by a trusted filter in front (e.g. jwt_authn's claim_to_headers).
    # Only list "header" in sources if Envoy overwrites this header on every request.
    tenant_header: Annotated[str, Field(pattern=r"^[a-z0-9-]+$")] = "x-tenant-id"
    # A request with no known identity: served in default_tier, or refused with 401.
    unknown: Literal["default_tier", "reject"] = "default_tier"
    # The tier of a request with no known identity.
    default_tier: Tier = Tier.P2
    # How long an unknown API key is remembered as unknown, sparing Redis the lookups.
    negative_cache_seconds: Annotated[float, Field(ge=0, le=300)] = 5.0
    # Lookups of keys not in any cache, per second, at most; past it they count as unknown.
    max_key_lookups_per_second: Annotated[float, Field(gt=0)] = 200.0

    @model_validator(mode="after")
    def _sources_unique(self) -> IdentityConfig:
        if not self.sources or len(set(self.sources)) != len(self.sources):
            raise ValueError("identity.sources must name each source once, at least one")
        return self


class OverloadConfig(Strict):
    # How long a pod's load report counts; a pod silent for longer is left out.
    report_ttl_seconds: Annotated[float, Field(gt=0, le=60)] = 1.0
    # A shed tier comes back only once the signal is this far past its threshold
    # (free KV ratio, or in-flight fraction), so decisions do not flap at the line.
    hysteresis: Annotated[float, Field(ge=0, le=0.5)] = 0.02
    # With no fresh report from any pod the load is unknown: these tiers are shed.
    shed_without_reports: tuple[Tier, ...] = (Tier.P2,)
    # Between two reports of a pod, count what was admitted since (its prompt's KV
    # blocks, one request in flight) in the load the shedding rules read, cluster-wide,
    # so a burst stops at a watermark instead of overshooting it. false: reports alone.
    project_admissions: bool = True
    # Eviction: while a pool's free KV-cache ratio is below this and a tier above the
    # evictable ones is shed for KV (so set it under that tier's shed_below_free_kv: P1's
    # 0.08 by default), end the evictable tiers' newest running streams, as many as free
    # the blocks to come back above it. None: never (the default).
    evict_below_free_kv: Fraction | None = None
    # A pod whose server refused requests at its own queue limits (vLLM's 503 past
    # --max-num-queued-reqs or --max-num-queued-tokens: vllm:admission_rejections rose
    # between two of its reports) counts as full for this long, as if its KV cache were:
    # the shedding rules shed for it before every pod refuses. 0: never.
    refusal_hold_seconds: Annotated[float, Field(ge=0, le=60)] = 2.0


class QueueConfig(Strict):
    # Starvation protection: a waiter goes first once it has waited this long...
    promote_after_seconds: Annotated[float, Field(gt=0)] = 1.0
    # ...or once this many requests were released past it. Promoted waiters get at most
    # this share of the releases, so aging cannot turn a sustained overload into FIFO and
    # make P0 wait behind a backlog of old P1 and P2 requests.
    promote_after_passed_over: Annotated[int, Field(ge=1)] = 50
    # The most of the releases starving waiters get.
    promoted_share: Annotated[float, Field(ge=0, le=1)] = 0.1
    # While P1 has waiters it gets at least this share of the releases (the brief: P1 is
    # never squeezed out completely, even under sustained P0 load).
    p1_min_share: Annotated[float, Field(ge=0, le=1)] = 0.2
    # A slot whose end Envoy never reported is taken back after this long.
    slot_lease_seconds: Annotated[float, Field(gt=0)] = 900.0
    # Foresee a newcomer's wait (for a slot: the queue ahead of it over the pool's recent
    # releases a second; for budget: the line ahead of it over the bucket's rate) and
    # give it its fallback at once when that outlasts what it may wait; cap a stream's
    # wait at what its TTFT target leaves; while a line waits for a tier's budget, answer
    # at once a request dearer than that budget serves. false: every request waits its
    # time out.
    foresee_waits: bool = True


class EngineConfig(Strict):
    # Send each tier's vllm_priority to vLLM, as the X-Vllm-Priority header (which vLLM
    # reads first) and in the body. Needs vLLM started with --scheduling-policy priority:
    # under its default, fcfs, vLLM 0.33 accepts a priority and silently ignores it (the
    # sidecar warns when pods' reporters say fcfs or nothing).
    send_priority: bool = False
    # The engines run with --enable-force-include-usage: every stream carries its usage
    # (in every chunk) unasked. Otherwise the sidecar asks for it on every stream whose
    # output it settles, and Envoy takes back out what the client did not ask for.
    force_include_usage: bool = False


ObjectiveName = Annotated[str, Field(min_length=1)]


class TierObjectives(Strict):
    """The InferenceObjective each tier's requests belong to."""

    p0: ObjectiveName = "qos-p0"
    # The InferenceObjective the tier's admitted requests name (its priority in the
    # endpoint picker's flow control: highest for P0).
    p1: ObjectiveName = "qos-p1"
    p2: ObjectiveName = "qos-p2"

    def __getitem__(self, tier: Tier) -> str:
        return str(getattr(self, tier.value))


class InferenceExtensionConfig(Strict):
    """The Gateway API Inference Extension's endpoint picker (EPP) behind the sidecar on
    the same route: each admitted request tells it the tier's InferenceObjective and the
    tenant, so its flow control orders and shares as the sidecar does."""

    # Send the tier's InferenceObjective and the tenant upstream to the picker.
    enabled: bool = False
    # The header names the picker reads: llm-d (x-llm-d-inference-objective and
    # x-llm-d-inference-fairness-id, llm-d-router's picker) or gateway-api
    # (x-gateway-inference-*, older pickers'; llm-d keeps them as deprecated aliases).
    header_names: Literal["llm-d", "gateway-api"] = "llm-d"
    # The InferenceObjective each tier maps to (their priorities in the tiers' order).
    objectives: TierObjectives = TierObjectives()


class PoolConfig(Strict):
    """One pool of GPUs behind the gateway (see sidecar/config/pools.py). What it leaves
    out is the top-level value."""

    # The `model` names of requests this pool serves; aliases are just more names.
    models: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    # In-flight requests the pool takes at most (default: fleet.max_concurrency).
    max_concurrency: Annotated[int, Field(ge=1)] | None = None
    # Input tokens a second its GPUs prefill (default: fleet.capacity_tokens_per_second);
    # the sum its fresh pods report, when they report one, overrides it.
    capacity_tokens_per_second: Positive | None = None
    # The longest context (prompt and output, in tokens) its model takes, as vLLM's
    # --max-model-len: a request overflowing to the pool must fit it.
    max_model_len: Annotated[int, Field(ge=1)] | None = None
    # Per tier, settings of tiers.pN to change for this pool: share, shed_below_free_kv...
    tiers: dict[Tier, dict[str, Any]] = Field(default_factory=dict)
    # Per tier, SLO targets (slo.targets.pN keys) to change for this pool.
    slo_targets: dict[Tier, dict[str, Any]] = Field(default_factory=dict)
    # The fields its model's chat template does not render (template.unrendered).
    template_unrendered: frozenset[TemplateField] | None = None
    # The request fields beyond a prompt of text it takes (extras), in place of the
    # top-level extras.
    extras: ExtrasConfig | None = None


class FairnessConfig(Strict):
    # Weighted fair shares between the tenants of a tier while its bucket is contended
    # (docs/fair-shares.md): a tenant over its share may not take the bucket
    # below `reserve` of its burst, which is kept for the tenants under theirs.
    enabled: bool = True
    # A tenant counts as active while it asked within this long.
    active_seconds: Annotated[float, Field(gt=0, le=300)] = 5.0
    # What a tenant was served is measured over this window (exponential decay).
    window_seconds: Annotated[float, Field(gt=0, le=300)] = 2.0
    # The part of the tier's burst kept for tenants under their share.
    reserve: Annotated[float, Field(gt=0, lt=1)] = 0.5
    # Tenants named in the metrics per tier (the rest only counted): bounded cardinality.
    top_tenants: Annotated[int, Field(ge=0, le=100)] = 5


class MediaConfig(Strict):
    """What the parts of a prompt that are not text are estimated to cost, in prompt
    tokens, until the answer's usage says what they cost (and the difference is settled,
    whatever the tier's output_weight)."""

    # An image part; a part marked `detail: low` (OpenAI's fixed 85-token rendering).
    image_tokens: Annotated[int, Field(ge=0)] = 1024
    # A part marked `detail: low` (OpenAI's fixed rendering).
    image_low_detail_tokens: Annotated[int, Field(ge=0)] = 85
    audio_tokens: Annotated[int, Field(ge=0)] = 1500  # an audio part: 30 s of speech
    # A video part.
    video_tokens: Annotated[int, Field(ge=0)] = 8192
    file_tokens: Annotated[int, Field(ge=0)] = 2048  # a file or document part
    # An uploaded audio file (transcription, translation): its bytes over this.
    audio_bytes_per_token: Positive = 320.0
    # The stored conversation a Responses API request continues (previous_response_id).
    stored_context_tokens: Annotated[int, Field(ge=0)] = 2048


class QosConfig(Strict):
    fleet: FleetConfig = FleetConfig()
    identity: IdentityConfig = IdentityConfig()
    tiers: TiersConfig = TiersConfig()
    overload: OverloadConfig = OverloadConfig()
    queue: QueueConfig = QueueConfig()
    engine: EngineConfig = EngineConfig()
    inference_extension: InferenceExtensionConfig = InferenceExtensionConfig()
    slo: SloConfig = SloConfig()
    controller: ControllerConfig = ControllerConfig()
    fairness: FairnessConfig = FairnessConfig()
    # Model pools behind the one gateway; none: one pool, "default", serves every model.
    pools: dict[PoolName, PoolConfig] = Field(default_factory=dict)
    media: MediaConfig = MediaConfig()
    # Fields some chat templates render and others do not: all counted unless named.
    template: TemplateConfig = TemplateConfig()
    # Request fields that make the engine render or run more than a prompt of text
    # (prompt_embeds, a request's chat_template, vllm_xargs, ...): refused unless allowed.
    extras: ExtrasConfig = ExtrasConfig()
    # Routes beyond the built-in table (sidecar/routes/table.py), or instead of its
    # entries: {path: kind}, a kind being chat, completions, responses, messages,
    # input_only, generate, ... to charge the route's body as that API's, `pass` to send
    # it on uncharged, `refuse` to answer 404, `websocket` to let it upgrade.
    routes: dict[str, str] = Field(default_factory=dict)

    @field_validator("routes")
    @classmethod
    def _routes_build(cls, routes: dict[str, str]) -> dict[str, str]:
        from sidecar.routes.table import build  # the table builds on nothing here

        build(routes)  # raises, naming the route at fault
        return routes

    @model_validator(mode="after")
    def _shares_within_bounds(self) -> QosConfig:
        shares_within_bounds(self.tiers, self.controller, "tiers")
        return self

    @model_validator(mode="after")
    def _pools_resolve(self) -> QosConfig:
        from sidecar.config.pools import resolve  # pools build on this schema

        resolve(self)  # raises, naming the pool and key at fault
        return self

    @classmethod
    def from_partial(cls, data: dict[str, Any]) -> QosConfig:
        """Validate `data` laid over the defaults: keys it omits keep their default."""
        if not isinstance(data, dict):
            raise ValueError("a config document is a mapping of keys to values")
        return cls.model_validate(deep_merge(cls().model_dump(mode="json"), data))

    def tier_rate(self, tier: Tier) -> float:
        """The tier's bucket refill rate in tokens a second."""
        return self.tiers[tier].share * self.fleet.capacity_tokens_per_second
