"""Relaxing a policy for one stack: only with a written reason, and never silently.

Every policy of the pack is mandatory. A stack may relax one by name in the policy pack
config (`pulumi preview --policy-pack policies --policy-pack-config <file>`):

    {"slurm-no-root-jobs": {"enforcementLevel": "advisory",
                            "reason": "lab hosts run test jobs as root; tracked in issue 42"}}

- With a non-empty `reason` the policy runs at the relaxed level (advisory or disabled) and
  `policy-relaxations-reported` prints the relaxation and its reason in every preview.
- Without one, the relaxation does not take effect (the policy stays mandatory) and
  `policy-relaxations-have-reasons` fails the preview naming the policy.
- The two relaxation policies themselves cannot be relaxed; a blanket `"all"` level is a
  relaxation of every policy and needs a reason on each.

The engine sends the reconciled config for every policy in its `Configure` call; engine.py
hands it to `configure` here. The validators read the module state, so tests set it the same
way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

REASONS_POLICY = "policy-relaxations-have-reasons"
REPORT_POLICY = "policy-relaxations-reported"
FIXED = {REASONS_POLICY: "mandatory", REPORT_POLICY: "advisory"}

# From strictest to loosest; "remediate" is at least as strict as mandatory for this pack.
_RANK = {"remediate": 0, "mandatory": 0, "advisory": 1, "disabled": 2}


@dataclass(frozen=True)
class Relaxation:
    policy: str
    declared: str
    requested: str
    reason: Optional[str]

    @property
    def effective(self) -> str:
        return self.requested if self.reason else self.declared


_relaxations: dict[str, Relaxation] = {}
_ignored: list[str] = []  # attempts to relax the fixed policies


def _reason(entry: dict[str, Any]) -> Optional[str]:
    r = entry.get("reason")
    if isinstance(r, str) and r.strip():
        return r.strip()
    return None


def find_relaxations(config: dict[str, dict[str, Any]],
                     declared: dict[str, str]) -> tuple[dict[str, Relaxation], list[str]]:
    """Relaxations in a pack config (policy -> {"enforcementLevel": ..., other properties}).

    A relaxation is a configured level looser than the policy's declared level. Returns
    (relaxations by policy, names of fixed policies someone tried to relax).
    """
    found: dict[str, Relaxation] = {}
    ignored: list[str] = []
    for name, entry in sorted(config.items()):
        if not isinstance(entry, dict) or name not in declared:
            continue
        level = entry.get("enforcementLevel")
        if not isinstance(level, str) or level not in _RANK:
            continue
        if _RANK[level] <= _RANK.get(declared[name], 0):
            continue
        if name in FIXED:
            ignored.append(name)
            continue
        found[name] = Relaxation(name, declared[name], level, _reason(entry))
    return found, ignored


def configure(config: dict[str, dict[str, Any]], declared: dict[str, str]) -> None:
    global _relaxations, _ignored
    _relaxations, _ignored = find_relaxations(config, declared)


def reset() -> None:
    configure({}, {})


def relaxations() -> list[Relaxation]:
    return [_relaxations[k] for k in sorted(_relaxations)]


def ignored_attempts() -> list[str]:
    return list(_ignored)


def effective_level(policy: str, configured: str) -> str:
    """The level a policy runs at: fixed policies ignore config; unreasoned relaxations do nothing."""
    if policy in FIXED:
        return FIXED[policy]
    r = _relaxations.get(policy)
    if r is not None:
        return r.effective
    return configured


# ---- the two policies -------------------------------------------------------------------

def validate_reasons(args, report_violation) -> None:
    """Mandatory: each relaxation gives a written reason."""
    for r in relaxations():
        if r.reason is None:
            report_violation(
                f'The policy pack config relaxes policy "{r.policy}" to {r.requested} without a '
                f'reason, so it stays {r.declared}; add "reason": "<why this stack may break the '
                f'rule>" next to its enforcementLevel, or remove the relaxation.', None)
    for name in ignored_attempts():
        report_violation(
            f'The policy pack config relaxes policy "{name}", which cannot be relaxed; remove '
            f'its entry from the policy pack config.', None)


def validate_report(args, report_violation) -> None:
    """Advisory: print every relaxation in effect, with its reason, in every preview."""
    for r in relaxations():
        if r.reason is not None:
            report_violation(
                f'Policy "{r.policy}" is relaxed from {r.declared} to {r.requested} for this '
                f'stack by the policy pack config, for this reason: {r.reason.rstrip(".")}. Remove the '
                f'relaxation once the reason no longer holds.', None)
