"""Reading Envoy's own timing of the sheds from the flash sale's access log."""

from __future__ import annotations

from sidecar.tooling.benchmarks.gateway_timing import shed_times, with_shed_log
from sidecar.tooling.stack import envoy_config


def test_only_the_sidecars_answers_count_by_the_tier_they_name(tmp_path):
    log = tmp_path / "sheds.log"
    log.write_text(
        "p2 shed_tier_budget 2000\n"
        "p2 prompt_too_long 4000\n"
        "- - 900000\n"  # served by a GPU: no decision header
        "p1 shed_queue_timeout 5000000\n"
        "- unauthenticated 700\n"  # no tier known
    )
    times = shed_times(log)
    assert times["p2"] == {"p50_ms": 2.0, "p99_ms": 4.0}
    assert times["p1"] == {"p50_ms": 5000.0, "p99_ms": 5000.0}
    assert times["p0"] == {"p50_ms": None, "p99_ms": None}


def test_the_log_is_added_beside_the_shipped_access_log(tmp_path):
    shipped = envoy_config.load()
    logged = with_shed_log(shipped, tmp_path / "sheds.log")
    names = [log["name"] for log in envoy_config.connection_manager(logged)["access_log"]]
    assert names == ["envoy.access_loggers.http_grpc", "envoy.access_loggers.file"]
    assert len(envoy_config.connection_manager(shipped)["access_log"]) == 1  # a copy
