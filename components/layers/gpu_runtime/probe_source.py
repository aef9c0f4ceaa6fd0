"""The GPU runtime baseline: a node-side probe script and the pure verdict on its output.

`onhost/probe.py` runs ON a node (as the program text of `python3 -`) and must stay
self-contained; nothing here imports it. `baseline.py` judges the probe
documents of a fleet against the stack's expectations.
"""

from __future__ import annotations

from pathlib import Path

#: The probe script, shipped verbatim to a node as the stdin of `python3 -`.
PROBE_SCRIPT = Path(__file__).resolve().with_name("onhost") / "probe.py"


def probe_source() -> str:
    """The probe's program text."""
    return PROBE_SCRIPT.read_text()
