"""Who counts as the gateway's Envoy: the token it presents, or a client certificate
naming the name it is given, or, without a token, any caller of a sidecar that listens on
loopback only."""

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


class Peer:
    """A call's context as gRPC gives it: the verified certificate's SANs, if any."""

    def __init__(self, *sans: bytes) -> None:
        self._auth = {"x509_subject_alternative_name": list(sans)} if sans else {}

    def auth_context(self) -> dict:
        return self._auth


def test_a_client_certificate_names_envoy_only_when_the_port_verifies_certificates():
    with pytest.raises(SystemExit, match="--tls-client-ca-file"):
        EnvoyCredential.for_listener("t", "0.0.0.0", client_name="qos-gateway-proxy")
    credential = EnvoyCredential.for_listener(
        "t", "0.0.0.0", client_name="qos-gateway-proxy", client_ca=True
    )
    assert credential.names_client(Peer(b"qos-gateway-proxy", b"localhost"))
    assert not credential.names_client(Peer(b"qos-sidecar"))
    assert not credential.names_client(Peer())  # no certificate
    assert not EnvoyCredential("t").names_client(Peer(b"qos-gateway-proxy"))
