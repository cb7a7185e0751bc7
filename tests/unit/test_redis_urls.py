"""Which Redis URLs the budget calls' own connection serves (the rest: redis-py)."""

from __future__ import annotations

from sidecar.redis_connect import budget_client
from sidecar.redis_multiplexed import MultiplexedRedis, understands


def test_urls_it_does_not_understand_go_to_redis_py():
    assert understands("redis://127.0.0.1:6379/0")
    assert understands("rediss://user:pw@host:6380/2")
    assert understands("unix:///run/redis.sock?db=1")
    assert not understands("redis://host:6379/0?ssl_cert_reqs=none")
    assert budget_client("redis://host:6379/0?health_check_interval=5") is None
    assert budget_client("redis://host:6379/0", cluster=True) is None
    assert isinstance(budget_client("redis://host:6379/0"), MultiplexedRedis)
