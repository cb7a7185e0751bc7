"""The configuration reference in docs/ is what the schema generates, key for key."""

from __future__ import annotations

from pathlib import Path

from sidecar.config.reference import markdown, rows_of
from sidecar.config.schema import QosConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration-reference.md"


def test_the_committed_reference_is_what_the_schema_generates():
    assert PAGE.read_text() == markdown(), "run: python tools/gen_config_reference.py"


def leaves(document: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in document.items():
        path = f"{prefix}{key}"
        keys |= leaves(value, f"{path}.") if isinstance(value, dict) and value else {path}
    return keys


def test_every_key_of_the_configuration_has_a_row_with_a_meaning():
    rows = {key: meaning for key, _kind, _default, meaning in rows_of()}
    for tier in ("p0", "p1", "p2"):
        rows |= {
            k.replace(".pN.", f".{tier}.").replace(".pN", f".{tier}"): m for k, m in rows.items()
        }
    wanted = leaves(QosConfig().model_dump(mode="json")) - {"pools", "routes"}
    assert wanted <= set(rows), wanted - set(rows)
    assert all(rows[key] for key in wanted), [key for key in wanted if not rows[key]]
