"""Write docs/configuration-reference.md from the configuration schema.
Run: python tools/gen_config_reference.py"""

from __future__ import annotations

from pathlib import Path

from sidecar.config.reference import markdown

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration-reference.md"

if __name__ == "__main__":
    PAGE.write_text(markdown())
    print(f"wrote {PAGE}")
