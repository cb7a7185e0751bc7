"""The operator's switches: the mode and the tiers shed by hand. The dashboard, the CLI
and the API switch through here; the store records who switched (config/audit.py)."""

from __future__ import annotations

from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode, OperatorMode


def switch_mode(current: OperatorMode, mode: Mode) -> tuple[OperatorMode, str]:
    return current.model_copy(update={"mode": mode}), f"mode {mode.value}"


def switch_shed(current: OperatorMode, tier: Tier, shed: bool) -> tuple[OperatorMode, str]:
    tiers = current.force_shed | {tier} if shed else current.force_shed - {tier}
    changed = current.model_copy(update={"force_shed": frozenset(tiers)})
    return changed, f"{'shed' if shed else 'unshed'} {tier.value}"
