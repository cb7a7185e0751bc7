"""Reading only the series a dialect needs out of a Prometheus text exposition, fast.

A model server's /metrics runs to hundreds of lines (histograms above all), and a
scraping sidecar reads dozens of pods every 200 ms: parsing every line with
prometheus_client's parser costs ~3 ms a pod. The lines of the few series a dialect reads
are found by one regular expression instead, and only they are parsed (text format
0.0.4: `name{label="value",...} value [timestamp]`, label values with \\\\, \\" and \\n
escapes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from prometheus_client.samples import Sample

from sidecar.loops.dialects.base import Samples

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE = re.compile(r"\\[\\\"n]")


@cache
def _lines_of(names: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return re.compile(rf"^({alternatives})(?:\{{(.*)\}})?[ \t]+([^ \t\r\n]+)", re.MULTILINE)


def samples_of(text: str, names: Iterable[str]) -> Samples:
    """The samples of the series named `names` (no others) in `text`."""
    found = []
    for name, labels, value in _lines_of(tuple(names)).findall(text):
        try:
            number = float(value)
        except ValueError:
            continue  # not a sample line after all
        found.append(Sample(name, _labels(labels), number))
    return Samples.of(found)


def _labels(text: str) -> dict[str, str]:
    return {key: _unescape(value) for key, value in _LABEL.findall(text)} if text else {}


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda match: _ESCAPES[match.group()], value) if "\\" in value else value
