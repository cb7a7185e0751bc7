"""Configuration, tenants and keys in a real Redis: the CLI writes, a watcher follows."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.cli import main
from sidecar.config import tenants
from sidecar.config.audit import PROGRAM
from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import hash_api_key
from sidecar.config.store import (
    API_KEYS_KEY,
    AUDIT_KEY,
    DOC_KEY,
    STORE_KEY,
    TENANTS_KEY,
    VERSION_KEY,
    ConfigStore,
)
from sidecar.config.watcher import ConfigWatcher
from sidecar.tooling.stack.admin_client import scrape
from tests.integration.helpers import readyz

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
    assert heavy.split()[1:5] == ["p1", "-", "0.5", "3"]  # tier, no rate, its burst, weight 3
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


@pytest.mark.parametrize("value", ["1e309", ".inf", ".nan", "inf", "[1e309]"])
def test_non_finite_numbers_are_refused_naming_the_key(cli, redis_url, value):
    for key in ("fleet.capacity_tokens_per_second", "tiers.p0.burst_seconds"):
        refused = cli(redis_url, "config", "set", key, value)
        assert refused.returncode == 2 and key in refused.stderr, refused
    assert cli(redis_url, "config", "show").returncode == 0


def test_a_document_broken_behind_the_cli_is_reported_and_repaired_by_set(cli, redis_url):
    client = redis.Redis.from_url(redis_url)
    document = QosConfig().model_dump(mode="json")
    document["fleet"]["capacity_tokens_per_second"] = None  # what an infinity was stored as
    client.set("qos:{qos-config}:doc", json.dumps(document))
    shown = cli(redis_url, "config", "show")
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert "fleet.capacity_tokens_per_second" in shown.stderr and "config set" in shown.stderr
    assert "capacity_tokens_per_second: null" in shown.stdout  # what Redis holds, to edit
    exported = cli(redis_url, "config", "export")
    assert exported.returncode == 2 and "fleet.capacity_tokens_per_second" in exported.stderr
    repaired = cli(redis_url, "config", "set", "fleet.capacity_tokens_per_second", "5000")
    assert repaired.returncode == 0, repaired.stderr
    assert "capacity_tokens_per_second: 5000.0" in cli(redis_url, "config", "show").stdout
    client.close()


def test_a_sidecar_started_on_a_broken_document_is_not_ready_until_it_is_repaired(
    cli, redis_url, sidecars
):
    set_capacity = cli(redis_url, "config", "set", "fleet.capacity_tokens_per_second", "1000")
    assert set_capacity.returncode == 0
    client = redis.Redis.from_url(redis_url)
    document = json.loads(client.get(DOC_KEY))
    document["fleet"]["capacity_tokens_per_second"] = None
    client.set(DOC_KEY, json.dumps(document))
    client.incr(VERSION_KEY)
    sidecar = sidecars()
    status, body = readyz(sidecar.admin_url)
    assert status == 503 and "fleet.capacity_tokens_per_second" in body and "config set" in body
    samples = scrape(f"{sidecar.admin_url}/metrics")
    assert samples["qos_config_invalid{}"] == 1
    # It serves the last document written through the CLI: P0's 60 % of 1 000.
    assert samples['qos_tier_rate_tokens_per_second{tier="p0"}'] == pytest.approx(600)
    assert "NOT READY" in sidecar.process.log_path.read_text()
    repaired = cli(redis_url, "config", "set", "fleet.capacity_tokens_per_second", "9000")
    assert repaired.returncode == 0
    deadline = time.monotonic() + 10
    while readyz(sidecar.admin_url)[0] != 200:
        assert time.monotonic() < deadline, "still not ready after the repair"
        time.sleep(0.05)
    assert scrape(f"{sidecar.admin_url}/metrics")["qos_config_invalid{}"] == 0
    client.close()


def leaf_keys(document: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in document.items():
        path = f"{prefix}{key}"
        keys += leaf_keys(value, f"{path}.") if isinstance(value, dict) and value else [path]
    return keys


CONFIG_KEYS = leaf_keys(QosConfig().model_dump(mode="json"))
yaml_values = st.one_of(
    st.sampled_from(["1e309", ".inf", ".nan", "inf", "nan", "null", "~", "[]", "{}", "''"]),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats().map(repr),
    st.text(max_size=30).map(json.dumps),
    st.text(alphabet="abc:-{}[]&*!|>'\" \n", max_size=30),
    st.just("x" * 100_000),
    st.lists(st.floats() | st.integers() | st.text(max_size=5), max_size=4).map(json.dumps),
)
FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def assert_config_whole(cli, redis_url):
    shown = cli(redis_url, "config", "show")
    assert shown.returncode == 0, shown.stderr
    stored = redis.Redis.from_url(redis_url).get(DOC_KEY)
    assert stored is None or QosConfig.model_validate_json(stored)


@FUZZ
@given(key=st.sampled_from([*CONFIG_KEYS, "routes./v1/x", "fleet.bogus"]), value=yaml_values)
def test_fuzzed_config_sets_leave_a_valid_document_and_name_the_key(cli, redis_url, key, value):
    if value.startswith("-"):
        value = f" {value}"  # not an option; YAML reads past the space
    result = cli(redis_url, "config", "set", key, value)
    if result.returncode != 0:
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert key.split(".")[0] in result.stderr, (key, value, result.stderr)
    assert_config_whole(cli, redis_url)


@FUZZ
@given(
    document=st.dictionaries(
        st.sampled_from(["fleet", "tiers", "media", "routes", "slo", "bogus"]),
        st.dictionaries(st.text(max_size=12), st.sampled_from([1e309, float("nan"), -1, "x", None]))
        | st.floats(),
        max_size=3,
    )
)
def test_fuzzed_imports_leave_a_valid_document(cli, redis_url, tmp_path_factory, document):
    path = tmp_path_factory.mktemp("import") / "qos.json"
    path.write_text(json.dumps(document))  # Python writes Infinity and NaN, which YAML reads
    result = cli(redis_url, "config", "import", str(path))
    if result.returncode != 0:
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "configuration refused" in result.stderr or str(path) in result.stderr
    assert_config_whole(cli, redis_url)


def listed(cli, redis_url) -> dict[str, list[str]]:
    lines = cli(redis_url, "tenants", "list").stdout.splitlines()[1:]
    return {line.split()[0]: line.split()[1:] for line in lines}


def redis_keys(client: redis.Redis) -> dict[str, str]:
    """Which tenant each stored key hash lets in, as Redis has it."""
    return {d.decode(): t.decode() for d, t in client.hgetall("qos:{qos-config}:apikeys").items()}


def test_a_key_belongs_to_one_tenant(cli, redis_url):
    client = redis.Redis.from_url(redis_url)
    assert (
        cli(redis_url, "tenants", "add", "victim", "--tier", "p1", "--api-key", "K1").returncode
        == 0
    )
    taken = cli(redis_url, "tenants", "add", "evil", "--tier", "p0", "--api-key", "K1")
    assert taken.returncode == 2 and "'victim'" in taken.stderr and "--move-key" in taken.stderr
    assert redis_keys(client) == {hash_api_key("K1"): "victim"}
    assert "evil" not in listed(cli, redis_url)  # nothing half-written
    assert listed(cli, redis_url)["victim"][-1] == "1"
    # Moving it is said, and the list stays true to Redis.
    moved = cli(
        redis_url, "tenants", "add", "evil", "--tier", "p0", "--api-key", "K1", "--move-key"
    )
    assert moved.returncode == 0 and "moved from tenant 'victim'" in moved.stdout
    assert redis_keys(client) == {hash_api_key("K1"): "evil"}
    assert listed(cli, redis_url)["victim"][-1] == "0" and listed(cli, redis_url)["evil"][-1] == "1"
    client.close()


def test_removing_a_tenant_revokes_only_its_own_keys(cli, redis_url):
    client = redis.Redis.from_url(redis_url)
    cli(redis_url, "tenants", "add", "victim", "--tier", "p1", "--api-key", "K1")
    cli(redis_url, "tenants", "add", "other", "--tier", "p2", "--api-key", "K2")
    # A key both tenants' sets name (as an older release could leave it): victim holds it.
    client.sadd("qos:{qos-config}:tenant-keys:other", hash_api_key("K1"))
    assert cli(redis_url, "tenants", "remove", "other").returncode == 0
    assert redis_keys(client) == {hash_api_key("K1"): "victim"}
    assert listed(cli, redis_url) == {"victim": ["p1", "-", "0.5", "1", "1"]}
    client.close()


def test_adding_an_existing_name_needs_update_and_says_what_changes(cli, redis_url):
    cli(redis_url, "tenants", "add", "shop", "--tier", "p1", "--api-key", "S1", "--rate", "300")
    again = cli(redis_url, "tenants", "add", "shop", "--tier", "p0", "--api-key", "S2")
    assert again.returncode == 2 and "--update" in again.stderr
    assert listed(cli, redis_url)["shop"][:2] == ["p1", "300"]
    update = ["tenants", "add", "shop", "--update", "--tier", "p0", "--api-key", "S2"]
    changed = cli(redis_url, *update)
    assert changed.returncode == 0, changed.stderr
    assert "tier p1 -> p0" in changed.stdout and "a key added (2 keys)" in changed.stdout
    assert listed(cli, redis_url)["shop"] == ["p0", "300", "0.5", "1", "2"]  # rate kept
    client = redis.Redis.from_url(redis_url)
    assert redis_keys(client) == {hash_api_key("S1"): "shop", hash_api_key("S2"): "shop"}
    client.close()
    gone = cli(redis_url, "tenants", "add", "nobody", "--update", "--tier", "p1")
    assert gone.returncode == 2 and "no tenant named 'nobody'" in gone.stderr


@pytest.mark.parametrize(
    "name,key,refused",
    [
        ("evil\u202egnp", "K9", "tenant name"),
        ("with space", "K9", "tenant name"),
        (".dot", "K9", "tenant name"),
        ("x" * 129, "K9", "tenant name"),
        ("fine", "", "API key"),
        ("fine", "has space", "API key"),
        ("fine", "k\u00e9y", "API key"),
        ("fine", "k" * 513, "API key"),
    ],
)
def test_odd_names_and_keys_are_refused(cli, redis_url, name, key, refused):
    result = cli(redis_url, "tenants", "add", name, "--tier", "p1", "--api-key", key)
    assert result.returncode == 2 and refused in result.stderr, result
    assert listed(cli, redis_url) == {}
    assert redis_keys(redis.Redis.from_url(redis_url)) == {}


@pytest.mark.asyncio
async def test_a_tenant_changed_under_a_writer_is_read_again_so_its_record_is_true(aredis):

    store = ConfigStore(aredis)
    await store.put_tenant("pay", Tenant(tier=Tier.P1))
    identity = (await aredis.get(STORE_KEY)).decode()
    stale = Tenant(tier=Tier.P2).model_dump_json()  # not what Redis holds
    record = Tenant(tier=Tier.P0).model_dump_json()
    own = (
        TENANTS_KEY,
        API_KEYS_KEY,
        "qos:{qos-config}:tenant-keys:pay",
        "qos:{qos-config}:version",
        STORE_KEY,
    )
    keys = tenants.Keys(own, AUDIT_KEY, 10)
    entry = tenants.put_entry(PROGRAM, "pay", stale, record, "", None)
    attempt = tenants.Attempt("pay", record, "", None, False, identity, stale, entry)
    assert await tenants.put(aredis, keys, own[2], attempt) is None  # read again
    assert (await store.load()).tenants["pay"].tier is Tier.P1
    assert await store.put_tenant("pay", Tenant(tier=Tier.P0))
    (last,) = await store.audit(1)
    assert last.what == "tenant pay changed"
    assert [(c.field, c.old, c.new) for c in last.changes] == [("tier", '"p1"', '"p0"')]
