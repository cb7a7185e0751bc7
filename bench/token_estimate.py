"""How far the default prompt-token estimate is from real tokenizers, by kind of field.

The estimate (sidecar.request.bodies.tokens) is compared with OpenAI's cl100k_base and
o200k_base encodings (the bpe-openai package ships them) on bench/samples: message text
(prompts.jsonl: English, Chinese, code, JSON, mixed) and what tools add
(tool_fields.jsonl: tool schemas, tool-call arguments, tool results, names), and the
message texts again where the engine renders them from other fields (a Responses
request's previous_input_messages, a request's own chat template). Each field
is measured as the sidecar reads it against the text the chat template renders: tool
schemas and arguments reach the template as objects, which `tojson` writes with spaces,
while the estimate reads the compact JSON the client sent.

Run: .venv/bin/pip install -e '.[bench]' && .venv/bin/python bench/token_estimate.py
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import bpe_openai

from sidecar.request.bodies.parts import Collected
from sidecar.request.bodies.tokens import estimate_text_tokens
from sidecar.request.counting.chat_form import chat_tools

SAMPLES = Path(__file__).parent / "samples"
ENCODINGS = ("cl100k_base", "o200k_base")


def fields() -> list[tuple[str, str, str]]:
    """(kind, as the estimate reads it, as the template renders it)."""
    read: list[tuple[str, str, str]] = []
    for line in (SAMPLES / "prompts.jsonl").read_text().splitlines():
        sample = json.loads(line)
        read.append((f"content: {sample['kind']}", sample["text"], sample["text"]))
        read.extend(_elsewhere(sample["text"]))
    for line in (SAMPLES / "tool_fields.jsonl").read_text().splitlines():
        sample = json.loads(line)
        kind, value = sample["kind"], sample["value"]
        read.append((kind, *_both(kind, value)))
    return read


def _elsewhere(text: str) -> list[tuple[str, str, str]]:
    """The same text in the other fields an engine renders into the prompt, each as the
    sidecar reads it (bodies/) and as the engine renders it."""
    carried = {"author": {"role": "user"}, "content": [{"type": "text", "text": text}]}
    template = "{{ bos_token }}" + text + "{% for m in messages %}{{ m.content }}{% endfor %}"
    return [
        # Responses' previous_input_messages: read as JSON, rendered as a harmony message.
        ("previous_input", _collected(carried), f"<|start|>user<|message|>{text}<|end|>"),
        # A request's own chat template: read as its text, rendered once.
        ("request template", template, text),
    ]


def _collected(value: Any) -> str:
    collected = Collected()
    collected.json(value)
    return collected.texts[0]


def _both(kind: str, value: Any) -> tuple[str, str]:
    if kind == "tool-schema":
        return json.dumps([value], separators=(",", ":")), _tojson(chat_tools([value]))
    if kind == "tool-arguments":  # a JSON string from the client, an object to the template
        return json.dumps(value, ensure_ascii=False), _tojson(value)
    return value, value


def _tojson(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def main() -> None:
    encoders = {name: bpe_openai.get_encoding(name) for name in ENCODINGS}
    errors: dict[tuple[str, str], list[float]] = defaultdict(list)
    for kind, read, rendered in fields():
        estimate = estimate_text_tokens(read)
        for name, encoder in encoders.items():
            real = len(encoder.encode(rendered))
            error = (estimate - real) / real
            errors[(kind, name)].append(error)
            errors[("all", name)].append(error)
    print(f"{'field':<22} {'tokenizer':<12} {'n':>3} {'mean':>6} {'mean |e|':>9} {'range':>13}")
    for (kind, name), values in sorted(errors.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        mean = statistics.fmean(values)
        mean_abs = statistics.fmean(abs(v) for v in values)
        span = f"{min(values):+.0%}..{max(values):+.0%}"
        print(f"{kind:<22} {name:<12} {len(values):>3} {mean:>+6.0%} {mean_abs:>9.0%} {span:>13}")


if __name__ == "__main__":
    main()
