"""Write the shipped Envoy configs made from envoy/envoy.yaml (envoy/compose.yaml,
deploy/kubernetes/base/envoy.yaml). Run: python tools/gen_envoy_configs.py"""

from __future__ import annotations

from sidecar.tooling.stack.envoy_variants import VARIANTS, render

if __name__ == "__main__":
    for variant in VARIANTS:
        variant.path.write_text(render(variant))
        print(f"wrote {variant.path}")
