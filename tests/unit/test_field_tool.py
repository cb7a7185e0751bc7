"""The sale as vLLM's `vllm bench serve` offers it: each tier's command, and its saved
results read back both as the tool reports them and as this harness reads answers."""

from __future__ import annotations

import itertools
from pathlib import Path

from sidecar.tooling.benchmarks import field_tool
from sidecar.tooling.benchmarks.field_tool import Target, TierLoad
from sidecar.tooling.benchmarks.load import ERROR, SERVED, SHED

FALLBACK = "We are serving many users right now."
LOAD = TierLoad("p2", "key-2", 2.5, 100, 10_000, FALLBACK, 9, 128)
TARGET = Target(
    "http://127.0.0.1:1", "mock-llm", Path("/tok"), Path("/sharegpt.json"), Path("/venv/python")
)


def saved(**rows) -> dict:
    """A result as the tool saves it with --save-detailed: one entry a request."""
    return {
        "duration": 10.0,
        "completed": 3,
        "failed": 1,
        "request_goodput": 0.2,
        "p50_ttft_ms": 40.0,
        "p99_ttft_ms": 900.0,
        "p50_tpot_ms": 47.0,
        "p99_tpot_ms": 60.0,
        "ttfts": [0.04, 0.002, 0.9, 0.0, 0.0],
        "itls": [[0.05, 0.05, 0.05], [], [0.04], [], []],
        "generated_texts": ["a b c d", FALLBACK, "x y", "", ""],
        "errors": ["", "", "", "Bad Request", "Too Many Requests"],
        "output_lens": [4, 1, 2, 0, 0],
        "start_times": [100.0, 100.5, 101.0, 102.0, 102.5],
        **rows,
    }


def test_each_tier_is_offered_by_the_tool_with_its_key_rate_seed_and_target():
    argv = field_tool.argv(LOAD, TARGET, Path("/work/p2.json"))
    pairs = dict(itertools.pairwise(argv))
    assert argv[0] == "/venv/python" and argv[3:5] == ["bench", "serve"]
    assert pairs["--header"] == "Authorization=Bearer key-2"
    assert pairs["--request-rate"] == "2.5" and pairs["--num-prompts"] == "100"
    assert pairs["--seed"] == "9" and pairs["--sharegpt-output-len"] == "128"
    assert pairs["--dataset-name"] == "sharegpt" and pairs["--goodput"] == "ttft:10000"
    assert pairs["--result-dir"] == "/work" and pairs["--result-filename"] == "p2.json"
    assert "--save-detailed" in argv


def test_a_fallback_the_tool_counts_as_served_and_a_429_are_read_as_shed():
    read = field_tool.outcomes(LOAD, saved())
    assert [o.result for o in read] == [SERVED, SHED, SERVED, ERROR, SHED]
    assert [o.at for o in read] == [0.0, 0.5, 1.0, 2.0, 2.5]
    served = read[0]
    assert served.ttft == 0.04 and abs(served.tpot - 0.05) < 1e-9
    assert read[3].detail == "Bad Request"


def test_the_tools_own_figures_are_kept_as_it_reports_them():
    figures = field_tool.tool_figures(saved())
    assert figures["completed"] == 3 and figures["failed"] == 1
    assert figures["goodput"] == 2  # 0.2 requests a second over 10 s
    assert (figures["ttft_p50_ms"], figures["ttft_p99_ms"]) == (40.0, 900.0)


def test_tiers_share_the_rate_that_offers_the_tokens():
    loads = field_tool.tier_loads(
        {"p0": 0.25, "p1": 0.75},
        tokens_per_second=1000,
        mean_prompt=100,
        seconds=4,
        seed=7,
        api_keys={"p0": "k0", "p1": "k1"},
        ttft_slo_ms={"p0": 1000, "p1": 3000},
        fallback_texts={"p0": "", "p1": FALLBACK},
        output_tokens={"p0": 48, "p1": 128},
    )
    assert [(load.tier, load.rate, load.prompts, load.seed) for load in loads] == [
        ("p0", 2.5, 10, 7),
        ("p1", 7.5, 30, 8),
    ]
