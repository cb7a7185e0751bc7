"""Configuration files read: whole or refused, naming the file and each key. Pure."""

from __future__ import annotations

import pytest

from sidecar.config.files import FileRefused, read_config, read_tenants
from sidecar.config.store import hash_api_key


def test_a_configuration_file_takes_defaults_for_what_it_leaves_out(tmp_path):
    path = tmp_path / "qos.yaml"
    path.write_text("fleet: {max_concurrency: 7}\n")
    read = read_config(path)
    assert read.declared.fleet.max_concurrency == 7
    assert read.declared.tiers.p0.share == 0.6  # the default
    path.write_text('{"fleet": {"max_concurrency": 7}}')  # JSON is YAML too
    assert read_config(path).declared == read.declared  # the same document


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("tiers: {p2: {share: 5}}", "tiers.p2.share"),
        ("fleet: {cores: 2}", "fleet.cores: unknown key"),
        ("fleet: [", "not YAML"),
    ],
)
def test_a_bad_configuration_file_is_refused_naming_it_and_the_key(tmp_path, text, named):
    path = tmp_path / "qos.yaml"
    path.write_text(text)
    with pytest.raises(FileRefused) as refused:
        read_config(path)
    assert str(path) in str(refused.value) and named in str(refused.value)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(FileRefused, match=r"qos\.yaml"):
        read_config(tmp_path / "qos.yaml")


def test_tenants_keep_only_their_keys_hashes(tmp_path):
    path = tmp_path / "tenants.yaml"
    digest = hash_api_key("k-care")
    path.write_text(
        "tenants:\n"
        "  pay: {tier: p0, api_keys: [k-pay]}\n"
        f"  care: {{tier: p1, api_keys: ['sha256:{digest}'], weight: 2}}\n"
    )
    tenants = read_tenants(path).declared
    assert tenants["pay"].digests() == {hash_api_key("k-pay")}
    assert tenants["care"].digests() == {digest}
    assert tenants["care"].record().weight == 2
    assert "api_keys" not in tenants["care"].record().model_dump()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("tenants: {pay: {tier: p9}}", "tenants.pay.tier"),
        ("tenants: {'bad name': {tier: p0}}", "tenants.bad name"),
        ("tenants: {pay: {tier: p0, api_keys: ['has space']}}", "tenants.pay.api_keys"),
        ("tenants: {pay: {tier: p0, color: red}}", "tenants.pay.color: unknown key"),
    ],
)
def test_a_bad_tenants_file_is_refused_whole(tmp_path, text, named):
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    with pytest.raises(FileRefused) as refused:
        read_tenants(path)
    assert named in str(refused.value)
