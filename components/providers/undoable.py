"""An action with an undo: do something on a host on create, undo it on delete, each proven
before it returns (it raises otherwise).

For what a probe/plan primitive cannot say as a desired state: K3s stopped on a node, whose
undo is the rollback from the preserved bundle; the accounting history restored from its
last backup, whose undo is a backup proven by a restore before the database goes. The
action's own record (`act`'s outputs) is kept over the inputs; a refresh records what
`observe` reads (nothing unless the kind says so), so it never acts.
"""

from __future__ import annotations

from pulumi.dynamic import UpdateResult

from .base import HostProvider
from .parts import Props, _entry


class ActionWithUndo(HostProvider):
    """Subclasses give `id_of`, `act` and `undo`; `replace_on`, `refuse` and `drifted` say
    when diff sees a change; `act_on_update` whether an update acts again."""

    #: an update acts again (else it records the new inputs over the old outputs)
    act_on_update = True

    def act(self, props: Props) -> Props:
        """Do it and prove it; the outputs it adds to the inputs."""
        raise NotImplementedError

    def converge(self, props: Props, record: Props) -> Props:
        return {**props, **self.act(props)}

    def observe(self, props: Props) -> Props:
        return {}

    def drifted(self, olds: Props, news: Props) -> bool:
        return False

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        return UpdateResult(outs=self.converge(news, {}) if self.act_on_update else {**olds, **news})
