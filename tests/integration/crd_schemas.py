"""Custom resources held to their projects' released CRDs (tests/fixtures/crds), as an API
server with strict field validation (`kubectl apply --validate=strict`) holds them: a
field the schema does not name is refused, not pruned. The CEL rules
(`x-kubernetes-validations`) are not evaluated; everything structural is."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "crds"


def _python_pattern(pattern: str) -> str:
    """An RE2 pattern as Python's `re` takes it: RE2 allows inline flags anywhere
    (`^(?i)...`), Python only at the start."""
    flags = "".join(re.findall(r"\(\?([a-z]+)\)", pattern))
    return f"(?{flags})" + re.sub(r"\(\?[a-z]+\)", "", pattern) if flags else pattern


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A structural OpenAPI v3 schema as JSON Schema, unknown fields refused wherever the
    schema does not preserve them."""
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties":
            converted[key] = {name: _json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            converted[key] = _json_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            converted[key] = [_json_schema(sub) for sub in value]
        elif key in ("default", "example") or key.startswith("x-kubernetes-"):
            continue
        elif key == "pattern":
            converted[key] = _python_pattern(value)
        else:
            converted[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        converted["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in converted:
        converted["type"] = [converted["type"], "null"]
    converted.pop("nullable", None)
    preserved = schema.get("x-kubernetes-preserve-unknown-fields", False)
    closed = "properties" in schema and "additionalProperties" not in schema
    if schema.get("type") == "object" and closed and not preserved:
        converted["additionalProperties"] = False
    return converted


_ROOT_FIELDS = {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {"type": "object"},
}


@functools.cache
def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) → the JSON Schema of that version, for every CRD kept."""
    found = {}
    for path in CRDS.glob("*.*.yaml"):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _json_schema(version["schema"]["openAPIV3Schema"])
            # The API server takes these at every root, whether a CRD names them or not.
            schema.setdefault("properties", {}).update(_ROOT_FIELDS)
            found[(f"{group}/{version['name']}", kind)] = schema
    return found


def is_custom(document: dict[str, Any]) -> bool:
    group = document["apiVersion"].rpartition("/")[0]
    return ("." in group and not group.endswith(".k8s.io")) or group in _CUSTOM_K8S_GROUPS


# Groups under k8s.io that are not Kubernetes' own (their schemas are CRDs).
_CUSTOM_K8S_GROUPS = {"gateway.networking.k8s.io", "inference.networking.k8s.io"}


def validate(document: dict[str, Any]) -> None:
    """Raises unless `document` is a resource of a kept CRD and valid by its schema."""
    key = (document["apiVersion"], document["kind"])
    if key not in schemas():
        raise LookupError(f"no CRD kept for {key}")
    jsonschema.validate(document, schemas()[key])
