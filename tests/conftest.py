"""Shared facts about the template, for its tests."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COOKIECUTTER_JSON = json.loads((ROOT / "cookiecutter.json").read_text(encoding="utf-8"))
# The name that every quoting bug trips over: both quote kinds, a backslash, and Chinese.
AWKWARD_NAME = 'O\'Brien "Quoted" 项目 back\\slash'
