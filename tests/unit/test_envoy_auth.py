"""Who counts as the gateway's Envoy: the token it presents, or, without one, any caller
of a sidecar that listens on loopback only."""

from __future__ import annotations

import pytest

from sidecar.envoy_auth import HEADER, EnvoyCredential


def test_with_a_token_only_the_token_passes():
    credential = EnvoyCredential("s3cret")
    assert credential.refusal([(HEADER, "s3cret")]) is None
    assert credential.refusal([(HEADER, b"s3cret")]) is None
    assert credential.refusal([(HEADER, "s3cre")]) == "wrong"
    assert credential.refusal([(HEADER, "-")]) == "wrong"  # Envoy's unset variable
    assert credential.refusal([("authorization", "Bearer s3cret")]) == "missing"
    assert credential.refusal(None) == "missing"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_without_a_token_the_sidecar_listens_on_loopback_alone(host):
    assert EnvoyCredential.for_listener("", host).refusal(()) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7"])
def test_without_a_token_a_reachable_port_is_refused_at_start(host):
    with pytest.raises(SystemExit, match="QOS_ENVOY_TOKEN"):
        EnvoyCredential.for_listener("", host)
    assert EnvoyCredential.for_listener("t", host).token == "t"
