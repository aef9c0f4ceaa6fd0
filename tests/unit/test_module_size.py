"""Small modules whose names say what they hold: no module of the program under components/ is
over 400 lines (issue 33). Code that runs on the hosts (`onhost/`) is a script of its own and
not held to it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 400


def program_modules() -> list[Path]:
    return [p for p in sorted((ROOT / "components").rglob("*.py")) if "onhost" not in p.relative_to(ROOT).parts]


def test_no_program_module_is_over_400_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in program_modules()}
    assert len(sizes) > 50 and "components/fleet.py" in sizes  # the walk found the program
    over = {p: n for p, n in sizes.items() if n > LIMIT}
    assert over == {}, f"over {LIMIT} lines (split by what each part holds): {over}"
