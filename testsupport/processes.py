"""The commands of the processes we ship, as tests read them: the Procfile's (`make run`)
and the systemd units' (deploy/systemd)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNITS = ROOT / "deploy" / "systemd"


def procfile() -> dict[str, str]:
    """Each Procfile process's command, by name."""
    lines = (ROOT / "Procfile").read_text().splitlines()
    return {name.strip(): cmd.strip() for name, _, cmd in (ln.partition(":") for ln in lines) if cmd.strip()}


def unit_commands(name: str, key: str) -> list[str]:
    """The unit's ExecStart= / ExecStartPre= lines."""
    return [line.split("=", 1)[1] for line in (UNITS / name).read_text().splitlines() if line.startswith(key + "=")]
