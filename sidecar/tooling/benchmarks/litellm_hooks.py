"""LiteLLM's side of the peer sale: its custom auth and the tier's priority per key.

LiteLLM's proxy loads this file from beside its config (`custom_auth:` and
`litellm_settings.callbacks:`), in LiteLLM's own venv: it imports nothing of the
sidecar's. Without a database LiteLLM has no virtual keys; its docs' way to give keys
their limits then is custom auth, whose returned object carries the key's TPM and RPM
limits and its metadata (LiteLLM's rate limiters enforce them, in Redis). The keys come
from `keys.json` beside this file: per API key, its tier, priority and limits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KEYS_FILE = Path(__file__).with_name("keys.json")


_KEYS: dict[str, dict[str, Any]] = json.loads(KEYS_FILE.read_text()) if KEYS_FILE.exists() else {}
_BY_TENANT = {entry["tenant"]: entry for entry in _KEYS.values()}


async def user_api_key_auth(request: Any, api_key: str) -> Any:
    """The key's limits and priority, as LiteLLM's custom auth returns them."""
    from litellm.proxy._types import UserAPIKeyAuth

    key = _KEYS.get(api_key.removeprefix("Bearer ").strip())
    if key is None:
        raise Exception("unknown API key")  # LiteLLM answers 401
    return UserAPIKeyAuth(
        api_key=api_key,
        key_alias=key["tenant"],
        tpm_limit=key["tpm_limit"],
        rpm_limit=key["rpm_limit"],
        metadata={"priority": key["tier"]},  # dynamic_rate_limiter_v3's reservation
    )


def _priority_hook() -> Any:
    """A pre-call hook that puts the key's priority in the request, for LiteLLM's
    request-prioritisation scheduler: what its docs have the client send."""
    from litellm.integrations.custom_logger import CustomLogger

    class TierPriority(CustomLogger):
        async def async_pre_call_hook(self, user_api_key_dict, cache, data, call_type):
            entry = _BY_TENANT.get(str(user_api_key_dict.key_alias or ""))
            if entry is not None:
                data["priority"] = entry["priority"]
            return data

    return TierPriority()


try:
    tier_priority = _priority_hook()
except ImportError:  # imported outside LiteLLM's venv (the sidecar's tests)
    tier_priority = None
