"""Every change is recorded: a scripted run of an operator's day (the CLI, the dashboard,
a file) is listed by `qos-sidecar audit` in order, with who and what changed, and no key
or token shows in the record, in the sidecar's log or in the process list."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest
import yaml

from sidecar.config.store import ConfigStore
from tests.integration.helpers import cli

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

TOKEN = "admin-token-not-to-be-seen"
PAY_KEY = "qsk-pay-key-not-to-be-seen"
FILED_KEY = "qsk-filed-key-not-to-be-seen"
SECRETS = (TOKEN, PAY_KEY, FILED_KEY)


def switch_on_dashboard(admin_url: str, body: dict) -> int:
    request = urllib.request.Request(
        f"{admin_url}/dashboard/api/shed",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "X-QoS-Request": "dashboard",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status


def command_lines() -> str:
    """Every process's command line this user may read, as `ps -ef` shows them."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except (OSError, UnicodeDecodeError):
                continue  # gone meanwhile, or not ours to read
    return "\n".join(lines)


@pytest.mark.timeout(120)
async def test_an_operators_day_is_listed_in_order_with_who_and_what(
    sidecars, aredis, redis_url, tmp_path
):
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(yaml.safe_dump({"tenants": {}}))
    sidecar = sidecars("--tenants-file", str(tenants_file), env={"QOS_ADMIN_TOKEN": TOKEN})
    store = ConfigStore(aredis)
    seen_in_ps: list[str] = []

    async def watch_processes() -> None:
        while True:
            seen_in_ps.append(command_lines())
            await asyncio.sleep(0.05)

    watching = asyncio.create_task(watch_processes())
    try:
        await cli(redis_url, "mode", "set", "core-only", "--by", "alice")
        await cli(
            redis_url,
            "tenants",
            "add",
            "pay",
            "--tier",
            "p0",
            "--api-key-file",
            "-",
            "--by",
            "alice",
            given=PAY_KEY + "\n",
        )
        await cli(redis_url, "config", "set", "fleet.max_concurrency", "9", "--by", "bob")
        status = await asyncio.to_thread(
            switch_on_dashboard, sidecar.admin_url, {"tier": "p2", "shed": True, "by": "carol"}
        )
        assert status == 200
        draft = tenants_file.with_suffix(".new")
        draft.write_text(
            yaml.safe_dump({"tenants": {"filed": {"tier": "p1", "api_keys": [FILED_KEY]}}})
        )
        draft.replace(tenants_file)

        async def filed() -> bool:
            return "filed" in (await store.load()).tenants

        for _ in range(100):
            if await filed():
                break
            await asyncio.sleep(0.05)
        assert await filed(), "the tenants file was not applied"
        await cli(redis_url, "tenants", "add", "pay", "--update", "--weight", "3", "--by", "bob")
        await cli(redis_url, "tenants", "remove", "pay", "--by", "alice")
        listed = json.loads(await cli(redis_url, "audit", "--output", "json"))
        text = await cli(redis_url, "audit", "--count", "50")
    finally:
        watching.cancel()

    said = [(entry["what"], entry["by"], entry["via"]) for entry in reversed(listed)]
    assert said == [
        ("mode core-only", "alice", "cli"),
        ("tenant pay added", "alice", "cli"),
        ("configuration set", "bob", "cli"),
        ("shed p2", "carol from 127.0.0.1", "api"),
        (f"tenants from {tenants_file}", "file", "file"),
        ("tenant pay changed", "bob", "cli"),
        ("tenant pay removed", "alice", "cli"),
    ]
    assert [entry["at"] for entry in listed] == sorted((e["at"] for e in listed), reverse=True)
    changes = {entry["what"]: entry["changes"] for entry in listed}
    assert {"field": "mode", "old": '"normal"', "new": '"core-only"'} in changes["mode core-only"]
    assert changes["configuration set"] == [
        {"field": "fleet.max_concurrency", "old": "256", "new": "9"}
    ]
    assert {"field": "api key", "old": None, "new": "added"} in changes["tenant pay added"]
    assert changes["tenant pay changed"] == [{"field": "weight", "old": "1.0", "new": "3.0"}]
    assert {"field": "filed.keys", "old": None, "new": "1"} in changes[
        f"tenants from {tenants_file}"
    ]

    # No secret anywhere: not in the record, not in the sidecar's log, not in `ps`.
    log = await asyncio.to_thread(Path(sidecar.process.log_path).read_text)
    assert "changed: " in log and "tenant pay removed by alice via cli" in log
    assert len(seen_in_ps) > 10
    for place, content in (("audit", text + json.dumps(listed)), ("log", log)):
        for secret in SECRETS:
            assert secret not in content, (secret, place)
    for snapshot in seen_in_ps:
        for secret in SECRETS:
            assert secret not in snapshot, secret
