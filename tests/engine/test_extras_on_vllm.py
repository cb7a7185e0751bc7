"""Fields beyond a prompt of text on vLLM itself, started with the flags that take them
(--enable-prompt-embeds, --trust-request-chat-template): prompt embeddings are counted a
token a row as the engine counts them, dense or sparse; a request's own chat template is
counted as the engine renders it in exact mode, and within the estimate's documented
error of a real vocabulary's count by default."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import bpe_openai
import pytest

from sidecar.request.bodies.read import read
from sidecar.request.bodies.tokens import estimate
from sidecar.request.counting.chat_form import chat_forms
from sidecar.request.counting.exact import ExactCounter
from sidecar.routes.table import RouteTable
from sidecar.tooling.engine import vllm, workspace
from tests.engine.conftest import serving

pytestmark = [pytest.mark.engine]

TABLE = RouteTable()
SETTINGS = vllm.EngineSettings(max_model_len=1024, max_num_seqs=2, request_inputs=True)
ASKED = "Where is the parcel I ordered on Monday, and when will it arrive? " * 20


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with serving(SETTINGS, tmp_path_factory.mktemp("engine-extras")) as started:
        yield started


def hidden_size() -> int:
    return json.loads((vllm.model() / "config.json").read_text())["hidden_size"]


def saved_tensor(expression: str) -> str:
    """A tensor saved by torch itself (the engine's venv has it), in base64."""
    script = (
        "import base64, io, torch; torch.manual_seed(0); buffer = io.BytesIO(); "
        f"torch.save({expression}, buffer); print(base64.b64encode(buffer.getvalue()).decode())"
    )
    made = subprocess.run(
        [str(workspace.python()), "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return made.stdout.strip()


def parsed(path: str, body: dict):
    return read(TABLE.resolve("POST", path), json.dumps(body).encode(), {})


def engine_count(engine, path: str, body: dict) -> int:
    asked = {**body, "model": engine.settings.served_model, "max_tokens": 1}
    request = urllib.request.Request(
        engine.url + path, json.dumps(asked).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as answer:  # an error raises
        return json.load(answer)["usage"]["prompt_tokens"]


@pytest.mark.timeout(600)
def test_prompt_embeddings_are_counted_a_token_a_row_as_vllm_counts_them(engine):
    exact = ExactCounter(vllm.model() / "tokenizer.json")
    hidden = hidden_size()
    dense = saved_tensor(f"torch.randn(37, {hidden})")
    batched = saved_tensor(f"torch.randn(1, 21, {hidden}, dtype=torch.float32)")
    sparse = saved_tensor(f"torch.zeros(50, {hidden}).to_sparse()")  # 50 rows in 2 KB
    for body in (
        {"prompt_embeds": dense},
        {"prompt_embeds": [dense, batched, sparse]},
        {"prompt": "hello there", "prompt_embeds": [sparse]},
    ):
        request = parsed("/v1/completions", body)
        counted = engine_count(engine, "/v1/completions", body)
        assert exact(request, frozenset()) == counted, body.keys()
        if "prompt" not in body:
            assert estimate(request) == counted  # rows are no estimate


@pytest.mark.timeout(600)
def test_a_text_as_embeddings_costs_what_it_costs_as_a_prompt(engine):
    """The same text given as its tokens' embeddings (a row a token) and as the prompt:
    the engine prefills as many tokens, and the gateway charges the same."""
    exact = ExactCounter(vllm.model() / "tokenizer.json")
    as_text = parsed("/v1/completions", {"prompt": ASKED})
    rows = exact(as_text, frozenset())
    embedded = {"prompt_embeds": saved_tensor(f"torch.randn({rows}, {hidden_size()})")}
    as_rows = parsed("/v1/completions", embedded)
    assert engine_count(engine, "/v1/completions", embedded) == rows
    assert engine_count(engine, "/v1/completions", {"prompt": ASKED}) == rows
    assert estimate(as_rows) == exact(as_rows, frozenset()) == rows


@pytest.mark.timeout(600)
def test_a_request_chat_template_is_counted_as_vllm_renders_it(engine):
    exact = ExactCounter(vllm.model() / "tokenizer.json")
    template = (
        ASKED + "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    messages = [{"role": "user", "content": "hi"}]
    for body in (
        {"messages": messages, "chat_template": template},
        {"messages": messages, "chat_template_kwargs": {"chat_template": template}},
    ):
        request = parsed("/v1/chat/completions", body)
        counted = engine_count(engine, "/v1/chat/completions", body)
        assert exact(request, frozenset()) == counted
        # The estimate, against a real vocabulary's count of what the engine renders
        # (the tiny model's own spends a token on every two characters).
        (form,) = chat_forms(request) or ()
        real = len(bpe_openai.get_encoding("o200k_base").encode(exact.render(form)))
        assert abs(estimate(request) - real) <= 0.35 * real, (estimate(request), real)
