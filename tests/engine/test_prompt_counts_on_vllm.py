"""Exact prompt counts against vLLM itself: the sidecar's exact mode, given the served
model's tokenizer files, counts every request of every API the engine renders (chat with
tools, tool calls and results, names, reasoning, documents, template arguments, continued
answers; completions; Responses; Messages) as the engine's own usage does. The default
estimate stays within its documented error of real tokenizers on the same prompts."""

from __future__ import annotations

import json
import urllib.request

import bpe_openai
import pytest

from sidecar.request.bodies.read import read
from sidecar.request.bodies.tokens import estimate
from sidecar.request.counting.chat_form import chat_forms
from sidecar.request.counting.exact import ExactCounter
from sidecar.routes.table import RouteTable
from sidecar.tooling.engine import vllm
from tests.engine.prompt_bodies import ALL

pytestmark = [pytest.mark.engine]

TABLE = RouteTable()
# docs/cost.md: the default estimate of a whole request against real tokenizers' counts
# (cl100k_base, the older vocabulary, takes Chinese at more tokens a character).
ESTIMATE_ERROR = {"o200k_base": 0.35, "cl100k_base": 0.45}


def parsed(path: str, body: dict):
    return read(TABLE.resolve("POST", path), json.dumps(body).encode(), {})


def engine_count(engine, path: str, body: dict) -> int:
    """The prompt's tokens in the engine's own usage, for an answer of one token."""
    asked = {**body, "model": engine.settings.served_model}
    if path == "/v1/responses":
        asked["max_output_tokens"] = 16  # the least the Responses API takes
    elif path != "/v1/messages":
        asked["max_tokens"] = 1
    request = urllib.request.Request(
        engine.url + path, json.dumps(asked).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as answer:  # an error raises
        usage = json.load(answer)["usage"]
    return usage["input_tokens"] if "input_tokens" in usage else usage["prompt_tokens"]


@pytest.fixture(scope="module")
def exact():
    return ExactCounter(vllm.model() / "tokenizer.json")


def test_the_corpus_spans_every_api_the_engine_renders():
    paths = [path for path, _ in ALL]
    assert len(ALL) >= 20
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"):
        assert paths.count(path) >= 3, path


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("path", "body"), ALL, ids=[f"{i}{p}" for i, (p, _) in enumerate(ALL)])
def test_exact_mode_counts_what_vllm_counts(idle_engine, exact, path, body):
    assert exact(parsed(path, body), frozenset()) == engine_count(idle_engine, path, body)


@pytest.mark.parametrize("encoding", sorted(ESTIMATE_ERROR))
def test_the_default_estimate_stays_within_its_documented_error(exact, encoding):
    encoder = bpe_openai.get_encoding(encoding)
    for path, body in ALL:
        request = parsed(path, body)
        forms = chat_forms(request)
        texts = [exact.render(f) for f in forms] if forms else list(request.prompt.texts)
        real = sum(len(encoder.encode(text)) for text in texts) + request.prompt.fixed_tokens
        assert abs(estimate(request) - real) <= ESTIMATE_ERROR[encoding] * real, (path, body)
