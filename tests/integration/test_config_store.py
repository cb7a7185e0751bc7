"""Configuration, tenants and keys in a real Redis: the CLI writes, a watcher follows."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest
import redis

from sidecar.cli import main
from sidecar.config.schema import QosConfig, Tenant, Tier
from sidecar.config.store import DOC_KEY, VERSION_KEY, ConfigStore, hash_api_key
from sidecar.config.watcher import ConfigWatcher

pytestmark = pytest.mark.integration


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys):
    """Run `qos-sidecar ARGS --redis-url URL` in this process and capture its output."""

    def run(redis_url: str, *args: str) -> Result:
        capsys.readouterr()
        code = main([*args, "--redis-url", redis_url])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def stored_text(client: redis.Redis) -> bytes:
    """Every key and value in Redis, as one blob to search."""
    blob = b""
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == b"string":
            values = [client.get(key)]
        elif kind == b"hash":
            values = [x for pair in client.hgetall(key).items() for x in pair]
        elif kind == b"set":
            values = list(client.smembers(key))
        else:
            values = []
        blob += key + b"".join(values)
    return blob


def test_tenants_add_list_remove_and_keys_are_stored_hashed(cli, redis_url):
    made = cli(redis_url, "tenants", "add", "acme", "--tier", "p1")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("qsk-") and len(key) > 40
    given = cli(
        redis_url, "tenants", "add", "pay", "--tier", "p0", "--api-key", "my-key", "--rate", "500"
    )
    assert given.returncode == 0 and given.stdout == ""  # nothing made, nothing printed

    client = redis.Redis.from_url(redis_url)
    everything = stored_text(client)
    assert hash_api_key(key).encode() in everything
    assert key.encode() not in everything and b"my-key" not in everything
    assert client.hget("qos:{qos-config}:apikeys", hash_api_key(key)) == b"acme"

    weighted = cli(redis_url, "tenants", "add", "heavy", "--tier", "p1", "--weight", "3")
    assert weighted.returncode == 0, weighted.stderr
    unweighted = cli(redis_url, "tenants", "add", "x", "--tier", "p1", "--weight", "0")
    assert unweighted.returncode == 2 and "weight" in unweighted.stderr

    listing = cli(redis_url, "tenants", "list").stdout
    assert "acme" in listing and "pay" in listing and "500" in listing
    heavy = next(line for line in listing.splitlines() if line.startswith("heavy "))
    assert heavy.split()[1:4] == ["p1", "-", "3"]  # tier, no rate, weight 3
    assert cli(redis_url, "tenants", "remove", "acme").returncode == 0
    assert client.hget("qos:{qos-config}:apikeys", hash_api_key(key)) is None
    gone = cli(redis_url, "tenants", "remove", "acme")
    assert gone.returncode == 2 and "no tenant named 'acme'" in gone.stderr
    client.close()


def test_config_set_refuses_unknown_keys_and_bad_values_and_keeps_the_old(cli, redis_url, tmp_path):
    assert cli(redis_url, "config", "set", "tiers.p2.share", "0.04").returncode == 0
    typo = cli(redis_url, "config", "set", "tiers.p2.shaer", "0.1")
    assert typo.returncode == 2 and "tiers.p2.shaer: unknown key" in typo.stderr
    bad = cli(redis_url, "config", "set", "fleet.max_concurrency", "-3")
    assert bad.returncode == 2 and "fleet.max_concurrency" in bad.stderr
    document = tmp_path / "qos.yaml"
    document.write_text("tiers:\n  p1: {weight: 2, colour: red}\n")
    refused = cli(redis_url, "config", "import", str(document))
    assert refused.returncode == 2 and "tiers.p1.colour: unknown key" in refused.stderr
    exported = cli(redis_url, "config", "export", "--format", "json").stdout
    config = QosConfig.model_validate_json(exported)
    assert config.tiers.p2.share == 0.04 and config.tiers.p1.weight == 1.0

    document.write_text('{"fleet": {"capacity_tokens_per_second": 1234}}')  # JSON works too
    assert cli(redis_url, "config", "import", str(document)).returncode == 0
    shown = cli(redis_url, "config", "show").stdout
    assert "capacity_tokens_per_second: 1234.0" in shown
    assert "share: 0.05" in shown  # import replaces: omitted keys take their defaults


def test_config_set_adds_changes_and_removes_routes(cli, redis_url):
    added = cli(redis_url, "config", "set", "routes./v1/my/generate", "chat")
    assert added.returncode == 0, added.stderr
    opened = cli(redis_url, "config", "set", "routes./pause", "pass")
    assert opened.returncode == 2 and "operational route" in opened.stderr
    wrong = cli(redis_url, "config", "set", "routes./v1/x", "gpu")
    assert wrong.returncode == 2 and "not a route kind" in wrong.stderr
    exported = QosConfig.model_validate_json(
        cli(redis_url, "config", "export", "--format", "json").stdout
    )
    assert exported.routes == {"/v1/my/generate": "chat"}
    assert cli(redis_url, "config", "set", "routes./v1/my/generate", "null").returncode == 0
    assert "/v1/my/generate" not in cli(redis_url, "config", "show").stdout


async def _until(check, within: float = 1.0) -> float:
    """Seconds until `check()` held; fails past `within`."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < within, "not picked up within the time allowed"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


@pytest.mark.asyncio
async def test_a_watcher_follows_changes_and_keeps_the_last_good_config(aredis):
    watcher = ConfigWatcher(aredis, poll_seconds=0.5)
    await watcher.start()
    try:
        assert watcher.current.version >= 1  # seeded the defaults
        store = ConfigStore(aredis)
        version = await store.save_config(QosConfig.from_partial({"fleet": {"max_concurrency": 7}}))
        await _until(lambda: watcher.current.version == version)  # announced
        assert watcher.current.config.fleet.max_concurrency == 7

        await store.put_tenant("acme", Tenant(tier=Tier.P1))
        await _until(lambda: "acme" in watcher.current.tenants)

        # A change whose announcement is missed is caught by the version poll.
        await aredis.set(
            DOC_KEY, QosConfig.from_partial({"fleet": {"max_concurrency": 8}}).model_dump_json()
        )
        await aredis.incr(VERSION_KEY)
        await _until(lambda: watcher.current.config.fleet.max_concurrency == 8)

        # Something invalid written behind the CLI's back: the last good config stays.
        good = watcher.current
        await aredis.set(DOC_KEY, '{"fleet": {"max_concurrency": "many"}}')
        bad_version = await store.put_tenant("other", good.tenants["acme"])  # announce it
        await _until(lambda: watcher.refused_version == bad_version)
        assert watcher.current is good
    finally:
        await watcher.stop()
