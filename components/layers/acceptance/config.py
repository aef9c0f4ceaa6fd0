"""The acceptance layer's config: the final job before the partitions open."""

from __future__ import annotations

from pydantic import Field

from ...config.types import Strict

class AcceptanceLayer(Strict):
    enabled: bool = True
    job_timeout_s: int = Field(300, ge=10)
