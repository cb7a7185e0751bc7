"""The shipped Envoy configs are made from envoy/envoy.yaml: each committed file is what
tools/gen_envoy_configs.py makes of it now."""

from __future__ import annotations

import pytest

from sidecar.tooling.stack.envoy_config import LOCAL_CONFIG
from sidecar.tooling.stack.envoy_variants import VARIANTS, render


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.path.name)
def test_each_committed_config_is_what_envoy_yaml_makes(variant):
    assert variant.path.read_text() == render(variant), "run: python tools/gen_envoy_configs.py"


def test_a_change_to_envoy_yaml_reaches_every_variant_or_is_refused():
    base = LOCAL_CONFIG.read_text()
    changed = base.replace("message_timeout: 0.25s", "message_timeout: 0.3s")
    for variant in VARIANTS:
        assert "message_timeout: 0.3s" in render(variant, changed)
        assert render(variant, changed) != variant.path.read_text()
    # A text a variant changes that is no longer there, once, is an error, not a skip.
    moved = base.replace("port_value: 9901}", "port_value: 9902}")
    with pytest.raises(ValueError, match="not once"):
        render(VARIANTS[0], moved)
