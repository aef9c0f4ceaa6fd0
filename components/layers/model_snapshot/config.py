"""The model snapshot layer's config: one pinned hub revision and how it is fetched."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field

from ...config.project import PROJECT
from ...config.types import (
    CommitId, DebianVersion, DirName, HttpEndpoint, HubPattern, HubRepoId, PackageName, RelativeFile, Strict,
)

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


class ModelSnapshotLayer(Strict):
    """One pinned model revision, downloaded once on the storage host, proven file by file,
    published atomically at `<storage.models.mountpoint>/<repo_id>/<revision>` and read-only
    from then on; every Slurm node sees it through the models mount.

    Partial downloads live in `staging_dir` on the models dataset itself, so that publishing
    is one rename on one filesystem; nodes see the store read-only through the export, and the
    storage host's own writes go only to staging and to the rename.

    `endpoint` is the hub (`HF_ENDPOINT`: a site mirror works). A token, if the repository
    needs one, is the Pulumi secret `gpu-fleet:hf_token` (`pulumi config set --secret`)."""

    enabled: bool = False
    repo_id: Optional[HubRepoId] = None
    revision: Optional[CommitId] = None
    allow_patterns: list[HubPattern] = Field(default_factory=list)
    #: what the admin knows the revision holds; a hub listing that differs stops the download
    expected_files: Optional[int] = Field(None, ge=1)
    expected_bytes: Optional[int] = Field(None, ge=1)
    endpoint: HttpEndpoint = "https://huggingface.co"
    #: the directory of partial downloads, at the root of the models dataset
    staging_dir: DirName = ".staging"
    #: concurrent file downloads; attempts of the whole download before the unit fails
    max_workers: int = Field(8, ge=1, le=64)
    attempts: int = Field(3, ge=1, le=20)
    #: how long one `pulumi up` waits for the download (the unit's own limit)
    timeout_s: int = Field(6 * 3600, ge=60)
    #: the file the acceptance job reads from the published snapshot
    marker: RelativeFile = "model_index.json"
    #: exact Debian packages the downloader needs on the storage host (python3-venv)
    packages: dict[PackageName, DebianVersion] = Field(default_factory=dict)



def check(cfg: FleetConfig) -> list[str]:
    """The model snapshot layer's rules: a pinned revision, and the storage layer to publish on."""
    m, st = cfg.model_snapshot, cfg.storage
    if not m.enabled:
        return []
    where = f"{PROJECT}:model_snapshot"
    problems = [f"{where}.{f}: required when the layer is enabled" for f in ("repo_id", "revision")
                if getattr(m, f) is None]
    if not st.enabled:
        problems.append(f"{where}: needs the storage layer (storage.enabled): the snapshot is "
                        "published on its models dataset and nodes see it through its mounts")
    if m.repo_id and m.repo_id.split("/")[0] == m.staging_dir:
        problems.append(f"{where}.staging_dir: {m.staging_dir!r} is also the owner of repo_id {m.repo_id!r}; "
                        "published snapshots would land inside the staging tree")
    return problems
