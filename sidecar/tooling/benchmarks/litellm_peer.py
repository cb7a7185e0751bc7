"""LiteLLM's proxy as the peer gateway: the one users would otherwise pick, set up as its
docs recommend for priorities and per-key token limits, in front of the same engines.

What it is told (written down in docs/benchmarks.md):
- the engines as deployments of one model group (`hosted_vllm/`, their OpenAI API), each
  with its share of the fleet's capacity as `tpm` and `rpm`;
- per API key, from custom auth (litellm_hooks.py; LiteLLM needs a database for virtual
  keys): the tier's share of that capacity as `tpm_limit` and `rpm_limit`, and the tier as
  the key's `priority` metadata;
- `dynamic_rate_limiter_v3`: past 80 % of the model's capacity it holds each priority to
  its share. The shares themselves (`priority_reservation`) are a licensed feature of
  LiteLLM: without a licence every priority gets the same default weight, as here;
- its request-prioritisation scheduler, the tier's number as the request's `priority`;
- one Redis (the sale's), shared by its rate limiters and its router.
LiteLLM counts prompt and answer tokens; the capacity it is given counts both.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sidecar.tooling.benchmarks import litellm_hooks
from sidecar.tooling.benchmarks.fleet import Fleet
from sidecar.tooling.benchmarks.traffic import mean_prompt_tokens
from sidecar.tooling.engine.vllm import SERVED_MODEL
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess

VERSION = "1.108.7"  # the newest whose `proxy` extra installs from PyPI here
ROOT = Path(__file__).resolve().parents[3]
PRIORITY = {"p0": 0, "p1": 1, "p2": 2}  # its scheduler: lower is served first


def venv() -> Path:
    """LiteLLM's own venv (scripts/setup-litellm.sh): its pins are not ours."""
    return Path(os.environ.get("QOS_LITELLM_VENV", ROOT / ".venv-litellm"))


@dataclass(frozen=True)
class KeyLimits:
    api_key: str
    tenant: str
    tier: str
    tokens_per_minute: int
    requests_per_minute: int


@dataclass(frozen=True)
class PeerSetup:
    model: str
    engine_urls: tuple[str, ...]
    tokens_per_minute: int  # the fleet's capacity, prompt and answer tokens
    requests_per_minute: int
    keys: tuple[KeyLimits, ...]
    redis_host: str
    redis_port: int
    request_timeout: float
    master_key: str = field(default_factory=lambda: "sk-" + secrets.token_hex(32))

    def config(self) -> dict:
        replicas = len(self.engine_urls)
        deployments = [
            {
                "model_name": self.model,
                "litellm_params": {
                    "model": f"hosted_vllm/{self.model}",
                    "api_base": f"{url}/v1",
                    "api_key": "none",
                    "tpm": self.tokens_per_minute // replicas,
                    "rpm": self.requests_per_minute // replicas,
                },
            }
            for url in self.engine_urls
        ]
        redis = {"host": self.redis_host, "port": self.redis_port}
        return {
            "model_list": deployments,
            "litellm_settings": {
                "callbacks": ["litellm_hooks.tier_priority", "dynamic_rate_limiter_v3"],
                "request_timeout": self.request_timeout,
                "num_retries": 0,
            },
            "router_settings": {
                "routing_strategy": "simple-shuffle",
                "redis_host": self.redis_host,
                "redis_port": self.redis_port,
                "timeout": self.request_timeout,
            },
            "general_settings": {
                "custom_auth": "litellm_hooks.user_api_key_auth",
                "master_key": self.master_key,  # it will not start without one
                "coordination_redis": redis,
            },
        }

    def keys_file(self) -> dict:
        return {
            key.api_key: {
                "tenant": key.tenant,
                "tier": key.tier,
                "priority": PRIORITY[key.tier],
                "tpm_limit": key.tokens_per_minute,
                "rpm_limit": key.requests_per_minute,
            }
            for key in self.keys
        }

    def write(self, directory: Path) -> Path:
        """The config, the keys and the hooks, side by side as LiteLLM loads them."""
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(litellm_hooks.__file__, directory / "litellm_hooks.py")
        (directory / "keys.json").write_text(json.dumps(self.keys_file(), indent=1))
        path = directory / "config.yaml"
        path.write_text(json.dumps(self.config(), indent=1))  # YAML reads JSON
        return path


def for_sale(
    fleet: Fleet,
    shares: dict[str, float],
    engine_urls: tuple[str, ...],
    redis_port: int,
    request_timeout: float,
) -> PeerSetup:
    """LiteLLM set up for the sale: the fleet's capacity and each tier's share of it, in
    tokens a minute, prompts and answers (LiteLLM counts both)."""
    callers = fleet.callers
    answer = sum(c.share * c.max_tokens for c in callers) / sum(c.share for c in callers)
    per_minute = 60 * fleet.capacity_rps
    tokens = per_minute * (mean_prompt_tokens(callers) + answer)
    keys = tuple(
        KeyLimits(
            caller.api_key,
            caller.tenant,
            caller.tier,
            int(shares[caller.tier] * tokens),
            max(1, int(shares[caller.tier] * per_minute)),
        )
        for caller in callers
    )
    return PeerSetup(
        SERVED_MODEL,
        engine_urls,
        int(tokens),
        max(1, int(per_minute)),
        keys,
        "127.0.0.1",
        redis_port,
        request_timeout,
    )


def start(config: Path, port: int, log: Path, workers: int = 1) -> ManagedProcess:
    """The proxy on loopback, ready once it answers its liveness check."""
    argv = [str(venv() / "bin" / "litellm"), "--config", str(config), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--num_workers", str(workers)]
    quiet = {"LITELLM_LOG": "ERROR", "DISABLE_SCHEMA_UPDATE": "true", "LITELLM_TELEMETRY": "False"}
    proxy = ManagedProcess("litellm", argv, log, env=quiet)
    alive = f"http://127.0.0.1:{port}/health/liveliness"
    return proxy.start_ready(lambda: readiness.http_ok(alive), timeout=120)
