"""One store, typed, from the stack's config to the providers that act on it.

`Store` is a dataset under its duty with every path the layer uses for it. The component
builds the stores once from the config (`stores`); each storage resource writes them into
its inputs with the `*_input` method for its recorded shape, and its provider reads them
back with the matching `from_*_input`. The shapes are the ones the stacks' state already
records, so no existing stack sees a diff.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import StorageLayer
from .render import DUTIES, EXPORT_IDS, PSEUDO


@dataclass(frozen=True, kw_only=True)
class Store:
    duty: str
    dataset: str
    #: where the storage host mounts (and exports) it
    mountpoint: str = ""
    #: where every Slurm node mounts it
    client_mount: str = ""
    #: read-only on the storage host too (models, unless a layer publishes into it)
    readonly: bool = False
    #: what the nodes mount: `<server>:<path>`
    source: str = ""

    @property
    def export_id(self) -> int:
        return EXPORT_IDS[self.duty]

    @property
    def pseudo(self) -> str:
        return PSEUDO[self.duty]

    def properties(self) -> dict[str, str]:
        """The ZFS properties the layer sets on the dataset."""
        return {"mountpoint": self.mountpoint, "canmount": "on", "sharenfs": "off",
                "readonly": "on" if self.readonly else "off"}

    # ZfsDatasets' shape
    def dataset_input(self) -> dict[str, Any]:
        return {"duty": self.duty, "name": self.dataset, "mountpoint": self.mountpoint,
                "properties": self.properties()}

    @classmethod
    def from_dataset_input(cls, d: dict[str, Any]) -> Store:
        return cls(duty=d["duty"], dataset=d["name"], mountpoint=d["mountpoint"],
                   readonly=d["properties"]["readonly"] == "on")

    # ExportCheck's shape
    def export_input(self) -> dict[str, Any]:
        return {"duty": self.duty, "dataset": self.dataset, "mountpoint": self.mountpoint,
                "export_id": self.export_id, "pseudo": self.pseudo}

    @classmethod
    def from_export_input(cls, d: dict[str, Any]) -> Store:
        return cls(duty=d["duty"], dataset=d["dataset"], mountpoint=d["mountpoint"])

    # ClientCheck's shape
    def client_input(self) -> dict[str, Any]:
        return {"duty": self.duty, "dataset": self.dataset, "client_mount": self.client_mount,
                "source": self.source}

    @classmethod
    def from_client_input(cls, d: dict[str, Any]) -> Store:
        return cls(duty=d["duty"], dataset=d["dataset"], client_mount=d["client_mount"], source=d["source"])


def stores(st: StorageLayer, *, server: str, models_writable: bool = False) -> list[Store]:
    """The layer's stores, models first; `server`: the address the nodes mount from."""
    out = []
    for duty in DUTIES:
        spec = getattr(st, duty)
        path = PSEUDO[duty] if st.client == "fuse-libnfs" else spec.mountpoint
        out.append(Store(duty=duty, dataset=spec.dataset, mountpoint=spec.mountpoint,
                         client_mount=spec.client_mount, readonly=duty == "models" and not models_writable,
                         source=f"{server}:{path}"))
    return out
