"""The policy pack's validators are imported from policies/ (the pack's own directory)."""

from __future__ import annotations

import sys

from tests.pulumi_cli import ROOT

POLICIES = ROOT / "policies"
if str(POLICIES) not in sys.path:
    sys.path.insert(0, str(POLICIES))
