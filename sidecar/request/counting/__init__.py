"""How many tokens a request's prompt is: estimated from its text, or counted exactly
as the engine renders and tokenizes it (the model's chat template and tokenizer)."""

from __future__ import annotations

from collections.abc import Callable

from sidecar.config.template import TemplateField
from sidecar.request.bodies.parsed import ParsedRequest

# Tokens of a request's prompt but its media (priced by the configuration), given the
# template fields its pool's model leaves unrendered.
PromptCounter = Callable[[ParsedRequest, frozenset[TemplateField]], int]
