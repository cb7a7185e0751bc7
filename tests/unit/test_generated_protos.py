"""Generated code is compiled from proto/ and never edited: a stale copy fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GENERATED = REPO / "sidecar" / "generated"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_protos", REPO / "tools" / "gen_protos.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_matches_a_fresh_compile(tmp_path):
    fresh = {p.relative_to(tmp_path): p.read_text() for p in _generator().generate(tmp_path)}
    committed = {
        p.relative_to(GENERATED): p.read_text()
        for p in GENERATED.rglob("*.py*")
        if "__pycache__" not in p.parts
    }
    assert sorted(fresh) == sorted(committed), "run: python tools/gen_protos.py"
    stale = [str(name) for name, text in fresh.items() if committed[name] != text]
    assert stale == [], f"stale generated files {stale}: run python tools/gen_protos.py"


def test_generated_module_imports_under_the_package():
    from sidecar.generated.qos.v1 import load_report_pb2, load_report_pb2_grpc

    report = load_report_pb2.LoadReport(pod_id="p", kv_cache_usage=0.5)
    assert load_report_pb2.LoadReport.FromString(report.SerializeToString()).pod_id == "p"
    assert hasattr(load_report_pb2_grpc, "LoadReporterStub")
