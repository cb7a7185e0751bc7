"""Writes tests/fixtures/prompt_embeds: prompt embeddings saved by torch itself, as
vLLM's completions take them (base64 of a torch.save file). Run with a Python that has
torch, the engine's venv: `.venv-engine/bin/python tools/make_prompt_embeds.py`."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "prompt_embeds"


def saved(value: object) -> str:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def main() -> None:
    torch.manual_seed(0)
    made = {
        # name: (what it holds, the tokens vLLM prefills for it; None: it refuses it)
        "dense_300x8": torch.randn(300, 8),
        "batch_1x6x8_half": torch.randn(1, 6, 8, dtype=torch.float16),
        "view_3x8_bf16": torch.randn(10, 8, dtype=torch.bfloat16)[2:5],
        "sparse_4000x8": torch.zeros(4000, 8).to_sparse(),
        "three_dims_2x3x8": torch.randn(2, 3, 8),
        "not_a_tensor": {"rows": torch.randn(3, 8)},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    for name, value in made.items():
        (OUT / f"{name}.b64").write_text(saved(value) + "\n", encoding="ascii")


if __name__ == "__main__":
    main()
