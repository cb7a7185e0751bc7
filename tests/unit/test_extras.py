"""Fields beyond a prompt of text: prompt embeddings counted by their rows as the engine
counts them, a request's own chat template, vLLM's extension and transfer arguments and
large grammars refused unless the pool allows them, then charged."""

from __future__ import annotations

import base64
import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest

from sidecar.config.extras import Extra, ExtrasConfig
from sidecar.config.pools import resolve as resolve_pools
from sidecar.config.schema import MediaConfig, QosConfig
from sidecar.refusals import Reason, Refusal
from sidecar.request.bodies.embeds import embedding_rows
from sidecar.request.bodies.extras import extras_tokens
from sidecar.request.bodies.limits import InvalidRequest
from sidecar.request.bodies.read import read
from sidecar.request.bodies.tokens import estimate
from sidecar.request.policy.cost import price, prompt_tokens
from sidecar.request.policy.guards import apply_guards
from sidecar.routes.table import RouteTable

TABLE = RouteTable()
MEDIA = MediaConfig()
EMBEDS = Path(__file__).resolve().parent.parent / "fixtures" / "prompt_embeds"
ASKED = "Where is the parcel I ordered on Monday, and when will it arrive? " * 40
ALL = ExtrasConfig(allowed=frozenset(Extra))


def embeds(name: str) -> str:
    return (EMBEDS / f"{name}.b64").read_text().strip()


def parse(path: str, body: dict):
    return read(TABLE.resolve("POST", path), json.dumps(body).encode(), {})


def chat(**fields):
    """A chat completion saying "hi", with these fields."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return parse("/v1/chat/completions", body)


def tokens(parsed, config: ExtrasConfig = ALL) -> int:
    added = extras_tokens(parsed.extras, config, parsed.model)
    return prompt_tokens(parsed.prompt, estimate(parsed) + added, MEDIA)


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        ("dense_300x8", 300),
        ("batch_1x6x8_half", 6),  # (1, seq_len, hidden): the engine drops the batch
        ("view_3x8_bf16", 3),  # a view saves its whole storage: its size is what counts
        ("sparse_4000x8", 4000),  # 2 KB of file for 4 000 rows
    ],
)
def test_prompt_embeddings_count_a_token_a_row(name, rows):
    assert embedding_rows(embeds(name), "prompt_embeds") == rows


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (embeds("three_dims_2x3x8"), "must be of shape (seq_len, hidden_size)"),
        (embeds("not_a_tensor"), "not a tensor saved by torch.save"),
        ("not base64 at all!", "not a tensor saved by torch.save"),
        (base64.b64encode(b"plain bytes").decode(), "not a tensor saved by torch.save"),
        (12, "must be a base64 string"),
    ],
)
def test_what_is_not_a_saved_tensor_is_refused_naming_the_field(entry, says):
    with pytest.raises(InvalidRequest) as refused:
        embedding_rows(entry, "prompt_embeds[1]")
    assert says in refused.value.message and refused.value.param == "prompt_embeds[1]"


class _Runs:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_a_pickle_that_would_run_code_is_refused_unrun(tmp_path):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as written:
        written.writestr("archive/data.pkl", pickle.dumps(_Runs(tmp_path / "ran"), protocol=2))
    with pytest.raises(InvalidRequest):
        embedding_rows(base64.b64encode(archive.getvalue()).decode(), "prompt_embeds")
    assert not (tmp_path / "ran").exists()


def test_each_tensor_is_a_prompt_of_its_rows_and_multiplies_the_answers():
    body = {
        "model": "m",
        "prompt": "hi",
        "prompt_embeds": [embeds("dense_300x8")] * 40,
        "max_tokens": 512,
        "n": 1,
    }
    parsed = parse("/v1/completions", body)
    assert parsed.output.per_request == 41
    assert parsed.prompt.fixed_tokens == 40 * 300
    assert tokens(parsed) == 40 * 300 + 1  # "hi"
    only = parse("/v1/completions", {"model": "m", "prompt_embeds": embeds("sparse_4000x8")})
    assert only.output.per_request == 1 and tokens(only) == 4000


def test_p0s_output_cap_holds_over_every_embedded_prompt():
    tier = QosConfig().tiers.p0.model_copy(update={"max_tokens_cap": 512})
    body = {"model": "m", "prompt": "hi", "prompt_embeds": [embeds("batch_1x6x8_half")] * 40}
    parsed = parse("/v1/completions", {**body, "max_tokens": 512})
    guarded = apply_guards(parsed, tier, "p0", tokens(parsed))
    assert guarded is not None and guarded["max_tokens"] == 512 // 41
    charge = price(tier, tokens(parsed), parsed.output)
    assert charge.expected_output == (512 // 41) * 41 <= 512


@pytest.mark.parametrize(
    ("body", "extra", "param"),
    [
        ({"prompt_embeds": embeds("view_3x8_bf16")}, Extra.PROMPT_EMBEDS, "prompt_embeds"),
        ({"chat_template": "{{ messages }}"}, Extra.CHAT_TEMPLATE, "chat_template"),
        (
            {"chat_template_kwargs": {"chat_template": "{{ messages }}"}},
            Extra.CHAT_TEMPLATE,
            "chat_template_kwargs.chat_template",
        ),
        ({"vllm_xargs": {"k": "v"}}, Extra.VLLM_XARGS, "vllm_xargs"),
        (
            {"kv_transfer_params": {"do_remote_decode": True}},
            Extra.TRANSFER_PARAMS,
            "kv_transfer_params",
        ),
        ({"ec_transfer_params": {"x": 1}}, Extra.TRANSFER_PARAMS, "ec_transfer_params"),
        (
            {"structured_outputs": {"grammar": "x" * 20_000}},
            Extra.LARGE_GRAMMARS,
            "structured_outputs",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"d": "x" * 20_000}}},
            Extra.LARGE_GRAMMARS,
            "response_format",
        ),
    ],
)
def test_each_extra_is_refused_naming_its_field_unless_the_pool_allows_it(body, extra, param):
    if "prompt_embeds" in body:
        parsed = parse("/v1/completions", {"model": "m", "prompt": "hi", **body})
    else:
        parsed = chat(**body)
    with pytest.raises(Refusal) as refused:
        extras_tokens(parsed.extras, ExtrasConfig(), "m")
    assert refused.value.reason is Reason.INVALID_REQUEST and refused.value.param == param
    assert "`m`" in refused.value.message
    allowed = ExtrasConfig(allowed=frozenset({extra}))
    assert extras_tokens(parsed.extras, allowed, "m") >= 0


def test_an_ordinary_structured_output_passes_uncharged_a_large_one_is_charged_by_size():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    small = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    parsed = chat(response_format=small)
    assert extras_tokens(parsed.extras, ExtrasConfig(), "m") == 0
    large = {"grammar": "root ::= " + " | ".join(f'"{i}"' for i in range(4000))}
    parsed = chat(structured_outputs=large)
    size = len(json.dumps(large, separators=(",", ":")))
    assert size > ExtrasConfig().grammar_max_bytes
    assert extras_tokens(parsed.extras, ALL, "m") == -(-size // 4)


def test_the_usual_request_carries_no_extras():
    assert chat(temperature=0.2, max_tokens=9).extras == ()


def test_a_pool_says_which_extras_it_takes_in_place_of_the_top_level():
    config = QosConfig.model_validate(
        {
            "extras": {"allowed": ["vllm_xargs"]},
            "pools": {
                "embeds": {"models": ["e"], "extras": {"allowed": ["prompt_embeds"]}},
                "default": {},
            },
        }
    )
    pools = resolve_pools(config)
    assert pools.get("embeds").extras.allowed == {Extra.PROMPT_EMBEDS}
    assert pools.get("default").extras.allowed == {Extra.VLLM_XARGS}


def test_a_request_chat_template_costs_what_the_same_text_costs_as_content():
    """Estimated as its text, as if rendered once (exact counts render it)."""
    plain = tokens(chat(messages=[{"role": "user", "content": ASKED}]))
    carried = tokens(
        chat(chat_template=ASKED + "{% for m in messages %}{{ m.content }}{% endfor %}")
    )
    assert abs(carried - plain) <= 0.3 * plain, (carried, plain)
