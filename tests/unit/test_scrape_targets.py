"""What `serve --scrape-targets` accepts and how it names the pods it scrapes."""

from __future__ import annotations

import pytest

from sidecar.loops.scrape.targets import Target, TargetsInvalid, endpoint, parse_targets


def test_addresses_names_and_groups():
    targets = parse_targets(
        "10.0.0.7:8000, dns:vllm.inference.svc.cluster.local:8000,"
        "chat=dns:sglang-chat:30000,[fd00::5]:8000"
    )
    assert targets == (
        Target("default", "10.0.0.7", 8000),
        Target("default", "vllm.inference.svc.cluster.local", 8000, dns=True),
        Target("chat", "sglang-chat", 30000, dns=True),
        Target("default", "fd00::5", 8000),
    )
    assert [str(t) for t in targets] == [
        "10.0.0.7:8000",
        "dns:vllm.inference.svc.cluster.local:8000",
        "chat=dns:sglang-chat:30000",
        "[fd00::5]:8000",
    ]


def test_nothing_given_is_no_scraping_and_repeats_count_once():
    assert parse_targets("") == ()
    assert parse_targets("a:1,a:1, ,") == (Target("default", "a", 1),)


@pytest.mark.parametrize("bad", ["10.0.0.7", "dns:name", "h:0", "h:99999", "h:port"])
def test_an_entry_without_a_port_or_with_a_bad_one_is_refused(bad):
    with pytest.raises(TargetsInvalid, match="HOST:PORT"):
        parse_targets(bad)


def test_a_group_needs_a_name():
    with pytest.raises(TargetsInvalid, match="group name"):
        parse_targets("=h:1")


def test_pod_ids_bracket_ipv6():
    assert endpoint("10.0.0.7", 8000) == "10.0.0.7:8000"
    assert endpoint("fd00::5", 8000) == "[fd00::5]:8000"
    assert endpoint("vllm-0.vllm", 8000) == "vllm-0.vllm:8000"
