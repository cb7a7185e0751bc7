"""Files a sidecar refuses, and a word its refusal says: what `serve --config-file` and
`--tenants-file` refuse and `config validate` must refuse alike."""

from __future__ import annotations

BAD_CONFIGURATIONS = [
    ("tiers: {p2: {share: 5}}", "tiers.p2.share"),
    ("fleet: {cores: 2}", "fleet.cores: unknown key"),
    ("fleet: [", "not YAML"),
]

BAD_TENANTS = [
    ("tenants: {pay: {tier: p9}}", "tenants.pay.tier"),
    ("tenants: {'bad name': {tier: p0}}", "tenants.bad name"),
    ("tenants: {pay: {tier: p0, api_keys: ['has space']}}", "tenants.pay.api_keys"),
    ("tenants: {pay: {tier: p0, color: red}}", "tenants.pay.color: unknown key"),
]

TENANTS_NOT_WHOLE = [
    ("", "holds nothing"),
    ("   \n# only a comment\n", "holds nothing"),
    ("tenants:\n  pay: {tier: p0\n", "not YAML"),  # cut mid-record
    ("tenants:\n  pay:\n    tier: p", "tenants.pay.tier"),  # cut mid-value
    ("{}", "tenants: Field required"),  # no tenants is said outright
    ("tenants: &t {pay: {tier: p0}}\nmore: *t", "aliases"),
    ("tenants: " + "[" * 20_000 + "]" * 20_000, "nest"),  # libyaml's own limit
    ("tenants:\n" + "".join(f"{' ' * i}- \n" for i in range(1, 3000)), "nested deeper"),
]
TENANTS_NOT_WHOLE_IDS = [
    "empty", "comments", "cut-record", "cut-value", "unsaid", "alias", "deep", "indented"
]  # fmt: skip
