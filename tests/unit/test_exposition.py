"""The fast reader of a dialect's series gives what prometheus_client's parser gives."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.loops.dialects import DIALECTS
from sidecar.loops.dialects.exposition import samples_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


def reference(text: str, names: tuple[str, ...]) -> list[tuple[str, dict, float]]:
    samples = (s for family in text_string_to_metric_families(text) for s in family.samples)
    return sorted(((s.name, s.labels, s.value) for s in samples if s.name in names), key=repr)


def fast(text: str, names: tuple[str, ...]) -> list[tuple[str, dict, float]]:
    found = samples_of(text, names)
    return sorted(
        ((s.name, s.labels, s.value) for series in found.by_name.values() for s in series),
        key=repr,
    )


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.prom")))
@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_every_fixture_reads_alike(fixture, dialect):
    text = (FIXTURES / fixture).read_text()
    names = DIALECTS[dialect].names
    assert fast(text, names) == reference(text, names)


def test_escapes_braces_timestamps_and_special_values():
    text = (
        "# TYPE m gauge\n"
        'm{a="x\\"y",b="1,2}{3",c="back\\\\slash",d="line\\nbreak"} 2.5 1700000000000\n'
        "m 1e3\n"
        'm{a=""} NaN\n'
        'm{a="inf"} +Inf\n'
        "m_total 9\n"  # another series sharing the prefix
        "mm 4\n"
    )
    assert _same_with_nan(text)
    found = samples_of(text, ("m",)).get("m")
    assert found[0].labels == {
        "a": 'x"y',
        "b": "1,2}{3",
        "c": "back\\slash",
        "d": "line\nbreak",
    }
    assert [s.value for s in found][1:2] == [1000.0] and math.isnan(found[2].value)
    assert found[3].value == math.inf and len(found) == 4


def _same_with_nan(text: str) -> bool:
    """NaN is not equal to itself: compare with it taken out."""
    strip = [x for x in fast(text, ("m",)) if not math.isnan(x[2])]
    return strip == [x for x in reference(text, ("m",)) if not math.isnan(x[2])]
