"""Exact prompt counts: the prompt rendered from the model's chat template as the engine
renders it, then tokenized by the model's own tokenizer.

Given a `tokenizer.json`, the chat template and special tokens are read beside it from
`tokenizer_config.json` (or `chat_template.jinja`), or from a template file named on its
own (as vLLM's `--chat-template`). A chat, batch, Messages or Responses request is turned
into the conversation the engine renders (chat_form.py, template_inputs.py) and counted
whole: roles, tool schemas, tool calls, special tokens and the generation prompt. Other
requests count their texts as the engine tokenizes them: a completion's prompt with the
tokenizer's special tokens, the rest without.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from sidecar.config.template import TemplateField
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.request.counting.chat_form import ChatForm, chat_forms, request_template
from sidecar.request.counting.jinja_render import ChatTemplate, compiled
from sidecar.request.counting.template_inputs import template_messages
from sidecar.routes.kinds import RouteKind

log = logging.getLogger(__name__)

# Where the final message's text ends, when the engine continues it rather than answer.
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


class ExactCounter:
    def __init__(self, tokenizer_file: Path, chat_template_file: Path | None = None) -> None:
        from tokenizers import Tokenizer  # only needed when a tokenizer file is configured

        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        config = _json_or_empty(tokenizer_file.with_name("tokenizer_config.json"))
        self._special = tuple(sorted(_special_tokens(config).items()))
        source = _template_source(tokenizer_file.parent, config, chat_template_file)
        self.template: ChatTemplate | None = compiled(source, self._special) if source else None

    def tokens(self, text: str, special: bool = False) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=special).ids)

    def __call__(self, parsed: ParsedRequest, unrendered: frozenset[TemplateField]) -> int:
        """The prompt's tokens as the engine counts them (but media, which is priced by
        the configuration); a conversation the template refuses is counted as text (the
        engine will refuse it too)."""
        if self.template is not None or request_template(parsed.body) is not None:
            try:
                forms = chat_forms(parsed)
                if forms is not None:
                    return sum(self.rendered_tokens(form) for form in forms)
            except Exception as error:  # a template raises on what its model cannot take
                log.debug("the chat template refused a request: %s", error)
        prompt = parsed.prompt
        special = parsed.kind is RouteKind.COMPLETIONS
        texts = prompt.rendered_texts(unrendered)
        return (
            prompt.fixed_tokens
            + prompt.template_overhead
            + sum(self.tokens(text, special) for text in texts)
        )

    def rendered_tokens(self, form: ChatForm) -> int:
        return self.tokens(self.render(form))

    def render(self, form: ChatForm) -> str:
        # A request's own template (its pool allows it) is rendered as vLLM renders it.
        template = compiled(form.template, self._special) if form.template else self.template
        assert template is not None
        messages = template_messages(
            form.messages, template.loops_over_content, template.knows_developer
        )
        final = None
        if form.continue_final_message and messages:
            final = str(messages[-1].get("content") or "")
            messages[-1] = {**messages[-1], "content": final + _CONTINUE_TAG}
        variables = {
            "messages": messages,
            "tools": form.tools,
            "documents": form.documents,
            "add_generation_prompt": form.add_generation_prompt,
        }
        text = template.render(variables, form.template_kwargs)
        if final is None:
            return text
        cut = text.rindex(_CONTINUE_TAG.strip())
        whole = text[cut : cut + len(_CONTINUE_TAG)] == _CONTINUE_TAG
        return text[:cut] if whole else text[:cut].rstrip()


def _json_or_empty(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    loaded = json.loads(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else {}


def _special_tokens(config: dict[str, Any]) -> dict[str, str]:
    """bos_token, eos_token, ...: strings, or added tokens whose `content` is one."""
    tokens = {}
    for key, value in config.items():
        if key.endswith("_token"):
            text = value.get("content") if isinstance(value, dict) else value
            if isinstance(text, str):
                tokens[key] = text
    return tokens


def _template_source(
    directory: Path, config: dict[str, Any], chat_template_file: Path | None
) -> str | None:
    if chat_template_file is not None:
        return chat_template_file.read_text(encoding="utf-8")
    beside = directory / "chat_template.jinja"
    if beside.exists():
        return beside.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None
