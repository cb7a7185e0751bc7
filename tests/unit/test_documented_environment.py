"""Every environment variable the documentation and the manifests name is one the code
reads (ours, or the OpenTelemetry SDK's for its standard OTEL_* variables): a variable
documented but never read would be set by users to no effect."""

from __future__ import annotations

import re
from pathlib import Path

import opentelemetry.sdk.environment_variables as sdk_variables

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\b(?:QOS|MOCK_VLLM|OTEL)_[A-Z0-9_]+\b")


def mentioned(paths: list[Path]) -> set[str]:
    return {name for path in paths for name in NAME.findall(path.read_text(encoding="utf-8"))}


def test_every_documented_variable_is_read_somewhere():
    documented = mentioned(
        [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "deploy").rglob("*.yaml")]
    )
    assert "QOS_TOKENIZER_FILE" in documented  # the pattern finds them
    tests = [path for path in (REPO / "tests").rglob("*.py") if path != Path(__file__)]
    sdk = Path(sdk_variables.__file__).parents[1].rglob("*.py")  # the SDK's own
    code = mentioned([*(REPO / "sidecar").rglob("*.py"), *tests, *sdk])
    assert documented - code == set()
