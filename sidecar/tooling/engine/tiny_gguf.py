"""Writes the tiny model as one GGUF file, for llama.cpp's llama-server.

Run by the engine's own interpreter (its venv has numpy, tokenizers and gguf):
`python tiny_gguf.py FILE`. The tokenizer, sizes and random weights are those of the
safetensors model vLLM serves (tiny_model.py, beside this file), under llama.cpp's
names; its end token never wins here either, so every answer runs to its n_predict.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gguf
import numpy as np
import tiny_model as tiny  # this file's folder is on the path when it runs as a script

# Hugging Face's llama names, as llama.cpp names them in GGUF.
TOP_LEVEL = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
PER_LAYER = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def gguf_name(name: str) -> str:
    if name in TOP_LEVEL:
        return TOP_LEVEL[name]
    _, _, layer, rest = name.split(".", 3)  # model.layers.N.<module>.weight
    module = rest.removesuffix(".weight")
    return f"blk.{layer}.{PER_LAYER[module]}.weight"


def write(path: Path) -> None:
    made = tiny.tokenizer()
    vocab = made.get_vocab_size()
    bos_id, eos_id = made.token_to_id(tiny.BOS), made.token_to_id(tiny.EOS)
    assert bos_id is not None and eos_id is not None, "the special tokens are trained in"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(tiny.CONTEXT)
    writer.add_embedding_length(tiny.HIDDEN)
    writer.add_block_count(tiny.LAYERS)
    writer.add_feed_forward_length(tiny.INTERMEDIATE)
    writer.add_head_count(tiny.HEADS)
    writer.add_head_count_kv(tiny.HEADS)
    writer.add_rope_dimension_count(tiny.HEAD_DIM)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    # The byte-level BPE as GPT-2's: tokens by id, their merges, the specials as control.
    by_id = sorted(made.get_vocab().items(), key=lambda item: item[1])
    tokens = [token for token, _ in by_id]
    specials = {bos_id, eos_id}
    merges = json.loads(made.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [
            gguf.TokenType.CONTROL if index in specials else gguf.TokenType.NORMAL
            for index in range(len(tokens))
        ]
    )
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(bos_id)
    writer.add_eos_token_id(eos_id)
    writer.add_add_bos_token(True)
    writer.add_chat_template(tiny.CHAT_TEMPLATE)
    for name, tensor in tiny.weights(vocab, eos_id).items():
        writer.add_tensor(gguf_name(name), np.ascontiguousarray(tensor, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    write(Path(sys.argv[1]))
