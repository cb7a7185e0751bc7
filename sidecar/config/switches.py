"""The operator's switches: the mode and the tiers shed by hand, and the record kept of
every switch (who or what made it, how, and when) so the page and `mode get` can say who
changed the mode last. The dashboard, the CLI and the API switch through here."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode, OperatorMode

VIAS = ("dashboard", "api", "cli")
MAX_BY = 64  # characters of a name kept


@dataclass(frozen=True)
class ModeChange:
    what: str  # "mode core-only", "shed p2", "unshed p2"
    by: str  # who: a name given, or else the user and host, or the client's address
    via: str  # one of VIAS
    at: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> ModeChange | None:
        """A stored record, or None for one this version cannot read."""
        try:
            data = json.loads(text)
            return cls(str(data["what"]), str(data["by"]), str(data["via"]), float(data["at"]))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.at))
        return f"{self.what} by {self.by} via {self.via} at {when}"


def clean_name(name: object) -> str:
    """A name someone gave, fit to show: printable, one line, at most MAX_BY characters."""
    if not isinstance(name, str):
        return ""
    return "".join(ch for ch in name if ch.isprintable()).strip()[:MAX_BY]


def switch_mode(current: OperatorMode, mode: Mode) -> tuple[OperatorMode, str]:
    return current.model_copy(update={"mode": mode}), f"mode {mode.value}"


def switch_shed(current: OperatorMode, tier: Tier, shed: bool) -> tuple[OperatorMode, str]:
    tiers = current.force_shed | {tier} if shed else current.force_shed - {tier}
    changed = current.model_copy(update={"force_shed": frozenset(tiers)})
    return changed, f"{'shed' if shed else 'unshed'} {tier.value}"
