"""Writes a tiny llama-architecture model with random weights, for vLLM on a CPU.

Run by the engine's own interpreter (its venv has numpy, safetensors and tokenizers):
`python tiny_model.py DIRECTORY`. Nothing is downloaded. Its text is noise, but the KV
cache, scheduling, streaming, usage and metrics it exercises are the engine's own. Its
end token never wins (its output row is zero while the others' logits are large), so
every answer runs to its max_tokens, as a load test wants.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HIDDEN = 128
LAYERS = 2
HEAD_DIM = 64  # vLLM's CPU attention takes 32, 64, 80, ... not 16
HEADS = HIDDEN // HEAD_DIM
INTERMEDIATE = 256
VOCAB = 512
CONTEXT = 8192  # what the model claims; the engine's --max-model-len bounds it
SEED = 20261202
# Large logits: the zero logit of the end token is never sampled against them.
OUTPUT_SCALE = 4.0
BOS, EOS = "<s>", "</s>"
# Renders what real templates render (tool schemas, documents, a message's name, its
# reasoning, the tool calls it made, a tool result's call id), so that counting the
# prompt as the engine renders it is tested on more than roles and content.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}tools: {{ tools | tojson }}\n{% endif %}"
    "{% if documents %}documents: {{ documents | tojson }}\n{% endif %}"
    "{% for message in messages %}"
    "{{ message['role'] }}"
    "{% if message['name'] is defined and message['name'] %} {{ message['name'] }}{% endif %}"
    "{% if message['tool_call_id'] is defined %} [{{ message['tool_call_id'] }}]{% endif %}: "
    "{% if message['reasoning_content'] is defined and message['reasoning_content'] %}"
    "<think>{{ message['reasoning_content'] }}</think>{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% endif %}"
    "{% if message['tool_calls'] is defined and message['tool_calls'] %}"
    "{% for call in message['tool_calls'] %}"
    " call {{ call['function']['name'] }}{{ call['function']['arguments'] | tojson }}"
    "{% endfor %}{% endif %}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
TRAINING_TEXT = [
    "Where is my order? It left the warehouse this morning and arrives tomorrow.",
    "Pay with a card, a wallet or a transfer; the checkout keeps your basket.",
    "The flash sale starts at noon: every tenant shares the same GPUs.",
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'\"()[]{}",
    # The flash-sale bench's prompts repeat "buy ": one token each, as the sidecar counts.
    "buy " * 64,
]


def tokenizer() -> Tokenizer:
    """A byte-level BPE: any text has tokens, none is unknown."""
    made = Tokenizer(models.BPE())
    made.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    made.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    made.train_from_iterator(TRAINING_TEXT, trainer)
    return made


def weights(vocab: int, eos_id: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)

    def matrix(rows: int, columns: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal((rows, columns)) * scale).astype(np.float32)

    tensors = {
        "model.embed_tokens.weight": matrix(vocab, HIDDEN, 1.0),
        "model.norm.weight": np.ones(HIDDEN, np.float32),
    }
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"{prefix}.self_attn.{name}.weight"] = matrix(HIDDEN, HIDDEN)
        tensors[f"{prefix}.mlp.gate_proj.weight"] = matrix(INTERMEDIATE, HIDDEN)
        tensors[f"{prefix}.mlp.up_proj.weight"] = matrix(INTERMEDIATE, HIDDEN)
        tensors[f"{prefix}.mlp.down_proj.weight"] = matrix(HIDDEN, INTERMEDIATE)
        tensors[f"{prefix}.input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        tensors[f"{prefix}.post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
    head = matrix(vocab, HIDDEN, OUTPUT_SCALE)
    head[eos_id] = 0.0
    tensors["lm_head.weight"] = head
    return tensors


def write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    made = tokenizer()
    vocab = made.get_vocab_size()
    bos_id, eos_id = made.token_to_id(BOS), made.token_to_id(EOS)
    assert bos_id is not None and eos_id is not None, "the special tokens are trained in"
    made.save(str(directory / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "model_max_length": CONTEXT,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": CONTEXT,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    generation = {"bos_token_id": bos_id, "eos_token_id": eos_id}
    (directory / "generation_config.json").write_text(json.dumps(generation))
    save_file(weights(vocab, eos_id), str(directory / "model.safetensors"))


if __name__ == "__main__":
    write(Path(sys.argv[1]))
