"""Paths shared by tests at the top of tests/."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
TARGETS = REPO / "tests" / "fixtures" / "targets"
