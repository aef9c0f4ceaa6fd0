"""What another layer adds to the Slurm layer's configuration, as plain data.

The tenancy layer's scheduler settings (preemption, priority, enforcement, topology) are a pure
function of its config; `Fleet` hands them to the Slurm layer, which renders them into its files
without knowing the layer they come from (imports point down).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class Scheduling:
    #: the slurm.conf section's title and its lines
    title: str = ""
    lines: tuple[str, ...] = ()
    #: node -> its features (NodeName ... Features=)
    features: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: more files beside slurm.conf: name under /etc/slurm -> text
    files: Mapping[str, str] = field(default_factory=dict)
    #: GPU shards (gres/shard) on each GPU: a GRES type, counted and accounted
    shards_per_gpu: int = 0
    #: node -> its Weight (NodeName ... Weight=; Slurm's default 1): heavier nodes are used last
    weights: Mapping[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.lines or self.features or self.files or self.shards_per_gpu or self.weights)

    def __add__(self, other: Scheduling) -> Scheduling:
        """Two layers' additions in one: the second's lines under its own title."""
        if not other:
            return self
        if not self:
            return other
        feats = {n: (*self.features.get(n, ()), *other.features.get(n, ()))
                 for n in {**self.features, **other.features}}
        return Scheduling(title=self.title if self.lines else other.title,
                          lines=(*self.lines, *(("", f"# {other.title}") if self.lines else ()), *other.lines),
                          features=feats, files={**self.files, **other.files},
                          shards_per_gpu=self.shards_per_gpu or other.shards_per_gpu,
                          weights={**self.weights, **other.weights})


#: what a stack without such a layer adds: nothing
NO_SCHEDULING = Scheduling()
