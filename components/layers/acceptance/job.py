"""Where stacks deployed before the canary job moved to the Slurm layer (slurm/canary.py)
recorded its provider: the engine keeps a dynamic provider pickled by reference, as
`components.layers.acceptance.job.CanaryJobProvider`, and unpickles that on refresh and
destroy until an update records the new path. Nothing in the program imports this."""

from __future__ import annotations

from ..slurm.canary import CanaryJobProvider

__all__ = ["CanaryJobProvider"]
