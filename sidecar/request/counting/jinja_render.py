"""Chat templates rendered as Hugging Face's tokenizers render them (what vLLM calls).

The same Jinja environment: sandboxed and immutable, blocks trimmed and left-stripped,
loop controls, a `{% generation %}` tag that only renders its body, `tojson` without
HTML escaping, `raise_exception` and `strftime_now`; the tokenizer's special tokens
(`bos_token`, `eos_token`, ...) as variables, the request's template arguments over
them. A template is compiled once and kept.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks what the assistant wrote (for
    training masks); rendering a prompt only needs its body."""

    tags = {"generation"}  # noqa: RUF012 (Jinja's own attribute)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        line = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(line)

    def _body(self, caller: Any) -> str:
        return str(caller())


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(form: str) -> str:
    return datetime.now().strftime(form)


def environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """One model's chat template, compiled."""

    def __init__(self, source: str, special_tokens: dict[str, str]) -> None:
        env = environment()
        self._template = env.from_string(source)
        self._special_tokens = special_tokens
        tree = env.parse(source)
        self.variables = frozenset(jinja2.meta.find_undeclared_variables(tree))
        self.loops_over_content = _loops_over_content(tree)
        self.knows_developer = '"developer"' in source or "'developer'" in source

    def render(self, variables: dict[str, Any], template_kwargs: dict[str, Any]) -> str:
        """The template's text for these variables; `template_kwargs` (the request's)
        reach it only where the template reads them, and never replace the messages."""
        wanted = {k: v for k, v in template_kwargs.items() if k in self.variables}
        return self._template.render({**self._special_tokens, **wanted, **variables})


@lru_cache(maxsize=8)
def compiled(source: str, special_tokens: tuple[tuple[str, str], ...]) -> ChatTemplate:
    return ChatTemplate(source, dict(special_tokens))


def _loops_over_content(tree: jinja2.nodes.Template) -> bool:
    """Whether the template walks a message's content as a list of parts (then the
    engine hands it parts, else one string)."""
    return any(_names_content(loop.iter) for loop in tree.find_all(jinja2.nodes.For))


def _names_content(node: jinja2.nodes.Node) -> bool:
    if isinstance(node, jinja2.nodes.Getattr):
        return node.attr == "content"
    if isinstance(node, jinja2.nodes.Getitem):
        key = node.arg
        return isinstance(key, jinja2.nodes.Const) and key.value == "content"
    if isinstance(node, jinja2.nodes.Filter) and node.node is not None:
        return _names_content(node.node)
    return False
