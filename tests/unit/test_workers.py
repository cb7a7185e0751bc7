"""serve --processes: who a slot belongs to, the workers' metrics as one, the settings
handed to a worker."""

from __future__ import annotations

import argparse
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from sidecar import options
from sidecar.settings import SidecarSettings
from sidecar.workers.merged_metrics import merge
from sidecar.workers.worker import WORKER_ENV, Worker


def test_a_slot_names_the_sibling_that_holds_it(monkeypatch):
    worker = Worker(1, 3, "ab12cd", Path("/run/x"))
    assert worker.owner == "ab12cdw1"
    assert worker.sibling_of("ab12cdw0-17-0f9a31c2b4d5") == 0
    assert worker.sibling_of("ab12cdw2-1-0f9a31c2b4d5") == 2
    assert worker.sibling_of("ab12cdw1-5-0f9a31c2b4d5") is None  # its own
    assert worker.sibling_of("ab12cdw7-5-0f9a31c2b4d5") is None  # no such worker
    assert worker.sibling_of("ffffffw0-5-0f9a31c2b4d5") is None  # another gateway's sidecar
    assert worker.sibling_of("0a7a4e75-3-0f9a31c2b4d5") is None
    assert worker.sibling_of("ab12cdw0-17") is None  # no nonce: not one of ours
    monkeypatch.setenv(WORKER_ENV, worker.to_env())
    assert Worker.from_env() == worker
    monkeypatch.delenv(WORKER_ENV)
    assert Worker.from_env() is None


WORKER_0 = """# HELP qos_decisions_total Decisions.
# TYPE qos_decisions_total counter
qos_decisions_total{tier="p1"} 3.0
# HELP qos_config_version Config version.
# TYPE qos_config_version gauge
qos_config_version 4.0
"""
WORKER_1 = """# HELP qos_decisions_total Decisions.
# TYPE qos_decisions_total counter
qos_decisions_total{tier="p1"} 5.0
qos_decisions_total{tier="p0"} 1.0
# HELP qos_config_version Config version.
# TYPE qos_config_version gauge
qos_config_version 4.0
"""


def test_the_workers_metrics_are_one_exposition_labelled_by_process():
    text = merge({1: WORKER_1, 0: WORKER_0}).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    decisions = {
        (s.labels["process"], s.labels["tier"]): s.value
        for s in families["qos_decisions"].samples
        if s.name == "qos_decisions_total"
    }
    assert decisions == {("0", "p1"): 3.0, ("1", "p1"): 5.0, ("1", "p0"): 1.0}
    versions = [(s.labels, s.value) for s in families["qos_config_version"].samples]
    assert versions == [({"process": "0"}, 4.0), ({"process": "1"}, 4.0)]
    assert text.count("# TYPE qos_decisions_total counter") == 1  # each family once


def test_a_workers_settings_travel_in_its_environment(monkeypatch):
    settings = SidecarSettings(
        grpc_port=50999, redis_url="redis://:pw@r:6379/2", over_limit_cache=False, processes=3
    )
    environment, flags = options.as_environment(settings)
    assert flags == []  # every setting has its variable: no secret on a command line
    assert environment["REDIS_URL"] == "redis://:pw@r:6379/2"
    assert environment["QOS_OVER_LIMIT_CACHE"] == "false"
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    options.add_arguments(parser, SidecarSettings)
    assert options.from_args(SidecarSettings, parser.parse_args([])) == settings
