"""What every configuration of a local stack keeps: its pools, and reports kept long
enough for the stack's report interval."""

from __future__ import annotations

from pathlib import Path

from sidecar.config.schema import QosConfig
from sidecar.tooling.stack.stack import REPORTS_KEPT, StackOptions


def test_a_fast_reporting_stack_keeps_the_default_report_ttl():
    assert StackOptions(Path("/nonexistent"), report_interval=0.1).base_config() == {}


def test_a_slow_reporting_stack_keeps_reports_for_a_few_intervals():
    base = StackOptions(Path("/nonexistent"), report_interval=1.0).base_config()
    config = QosConfig.from_partial(base)
    assert config.overload.report_ttl_seconds == REPORTS_KEPT * 1.0


def test_pools_and_the_report_ttl_are_kept_together():
    options = StackOptions(Path("/nonexistent"), replicas=1, pools=2, report_interval=0.5)
    base = options.base_config()
    assert set(base) == {"pools", "overload"} and len(base["pools"]) == 2
