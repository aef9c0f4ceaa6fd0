"""CUDA and NVML version numbers as NVML reports them and as the stack spells them
('12.9.1' <-> 12090; '13.580.173.02' -> driver '580.173.02'). Apart from baseline.py because
the verdicts (verdicts.py) print them as well as the judging."""

from __future__ import annotations

import re
from typing import Optional


def cuda_version_number(version: str) -> int:
    """'12.9.1' -> 12090, the encoding NVML uses for the CUDA driver version."""
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)*", version.strip())
    if not m:
        raise ValueError(f"not a CUDA version: {version!r}")
    return int(m.group(1)) * 1000 + int(m.group(2)) * 10


def cuda_version_text(number: int) -> str:
    """12090 -> '12.9'."""
    return f"{number // 1000}.{(number % 1000) // 10}"


def nvml_library_driver(nvml_version: Optional[str]) -> Optional[str]:
    """'13.580.173.02' -> '580.173.02': the driver release the NVML library belongs to."""
    if not nvml_version or "." not in nvml_version:
        return None
    return nvml_version.split(".", 1)[1] or None
