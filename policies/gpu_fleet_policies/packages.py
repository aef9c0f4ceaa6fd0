"""Packages: exact versions, held, so every host runs the same binaries.

The seed's lesson: a routine `apt upgrade` slipped another Slurm onto some nodes. A
PackageSet names each package with one exact Debian version (no wildcard, no range, no
empty or "latest") and holds it with `apt-mark hold`.
"""

from __future__ import annotations

import re

from . import props as P
from .common import resource

# Debian policy: [epoch:]upstream_version[-debian_revision]; upstream starts with a digit.
_DEBIAN_VERSION = re.compile(r"^(?:\d+:)?\d[A-Za-z0-9.+~-]*$")
_LOOSE_WORDS = {"latest", "any", "newest", "stable", "current", "installed"}


def version_problem(version) -> str | None:
    """Why a package version is not exact, or None when it is."""
    if version is None:
        return "has no version"
    if not isinstance(version, str):
        return f"has the version {version!r}, which is not a string"
    v = version.strip()
    if not v:
        return "has an empty version"
    if v.lower() in _LOOSE_WORDS:
        return f'has the version "{version}", which is not a version'
    if any(ch in v for ch in "*?[]"):
        return f'has the wildcard version "{version}"'
    if any(op in v for op in ("<", ">", "=", "^", "!", ",", " ", "||")) or v.startswith("~"):
        return f'has the version range "{version}"'
    if not _DEBIAN_VERSION.match(v):
        return f'has "{version}", which is not an exact Debian version'
    return None


def validate_exact_versions(args, report_violation) -> None:
    res = resource(args, P.PACKAGE_SET)
    if res is None:
        return
    packages = res.get("packages")
    if P.is_unknown(packages):
        return
    packages = P.reveal(packages)
    who = res.describe("PackageSet")
    if packages is None:
        return  # nothing to install, nothing to pin
    if not isinstance(packages, dict):
        report_violation(f"{who} lists packages as {type(packages).__name__}; give a mapping "
                         "of package name to exact version.", None)
        return
    for name in sorted(packages):
        version = packages[name]
        if P.is_unknown(version):
            continue
        problem = version_problem(version)
        if problem:
            report_violation(
                f"{who}: package {name} {problem}; pin it to one exact Debian version (as "
                f"`apt-cache policy {name}` lists it) so every host runs the same build.", None)


def validate_held(args, report_violation) -> None:
    res = resource(args, P.PACKAGE_SET)
    if res is None:
        return
    hold = res.get("hold", True)
    if P.is_unknown(hold):
        return
    hold = P.reveal(hold)
    if hold is None:
        hold = True  # the PackageSet default
    if hold is not True:
        names = P.reveal(res.get("packages"))
        listed = ", ".join(sorted(names)) if isinstance(names, dict) and names else "its packages"
        report_violation(
            f"{res.describe('PackageSet')} does not hold {listed} (hold={hold!r}); set hold=True "
            "so a routine apt upgrade cannot replace the pinned versions.", None)
