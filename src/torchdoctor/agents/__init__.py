"""torchdoctor for coding agents: ``torchdoctor mcp``, a Model Context Protocol server whose tools
are the diagnose → patch → verify loop (docs/agents.md), and the skill that tells an agent how to
drive it (``SKILL.md``, printed by ``torchdoctor mcp --skill``).

The server itself (:mod:`.server`) needs the optional ``mcp`` package; what is here does not.
"""

from __future__ import annotations

from pathlib import Path

from ._root import OWN_DIR, OutsideRoot, Root

#: The skill for agents, shipped in the package.
SKILL = Path(__file__).with_name("SKILL.md")

__all__ = ["OWN_DIR", "SKILL", "OutsideRoot", "Root"]
