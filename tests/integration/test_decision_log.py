"""The decision log through real Envoy: with --decision-log-sample 1 the sidecar writes one
JSON line per decision on the logger qos.decisions (who, tier, pool, route, outcome,
reason, cost, wait), stamped in UTC; without it, none."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aiohttp
import pytest

from tests.integration.helpers import stack_with_tenants, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

PAY_KEY, BATCH_KEY = "log-pay-p0", "log-batch-p2"
UTC_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def decisions(log: Path) -> list[dict]:
    lines = log.read_text().splitlines()
    found = [json.loads(line) for line in lines if line.startswith("{")]
    return [entry for entry in found if entry.get("logger") == "qos.decisions"]


async def chat(session, url: str, key: str) -> int:
    body = {"model": "mock-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    headers = {"authorization": f"Bearer {key}"}
    async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as answer:
        await answer.read()
        return answer.status


@pytest.mark.parametrize("sample", [1.0, 0.0])
async def test_each_decision_is_one_json_line_in_utc(tmp_path, sample):
    tenants = {"pay": ("p0", PAY_KEY), "reports": ("p2", BATCH_KEY)}
    args = ("--decision-log-sample", str(sample))
    with stack_with_tenants(tmp_path, tenants, sidecar_args=args) as stack:
        log = stack.process("sidecar").log_path
        async with aiohttp.ClientSession() as session:
            assert await chat(session, stack.envoy_url, PAY_KEY) == 200
            stack.config.mode("core-only")
            assert await chat(session, stack.envoy_url, BATCH_KEY) == 200  # its fallback
        if not sample:
            assert decisions(log) == [] and log.stat().st_size > 0
            return
        await wait_until(lambda: len(decisions(log)) == 2, 10, "two decisions logged")
    admitted, shed = decisions(log)
    assert UTC_STAMP.fullmatch(admitted["ts"]) and UTC_STAMP.fullmatch(shed["ts"])
    assert admitted["message"] == "decision"
    assert {k: admitted[k] for k in ("outcome", "reason", "tier", "tenant", "pool", "route")} == {
        "outcome": "admit",
        "reason": "admitted",
        "tier": "p0",
        "tenant": "pay",
        "pool": "default",
        "route": "chat",
    }
    assert admitted["cost_tokens"] > 0 and admitted["decided_ms"] >= 0
    assert {k: shed[k] for k in ("outcome", "reason", "tier", "tenant", "status")} == {
        "outcome": "respond",
        "reason": "shed_core_only",
        "tier": "p2",
        "tenant": "reports",
        "status": 200,
    }
