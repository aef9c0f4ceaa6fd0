"""The model snapshot policies, called directly: what the layer declares passes, each broken
contract fails with a sentence naming the resource and the fix, unknown values are skipped,
and other resources are not this pack's model policies' business."""

from __future__ import annotations

import pytest

from components.layers.model_snapshot import render
from components.layers.model_snapshot.snapshot import Snapshot

from gpu_fleet_policies import model, relax
from gpu_fleet_policies.pack import DESCRIPTIONS, VALIDATORS, declared_levels

from .fakes import FILE, SYSTEMD_UNIT, UNKNOWN_BOOL, UNKNOWN_STR, Secret, file_args, resource_args, violations

REV = "0123456789abcdef0123456789abcdef01234567"
STORAGE_CONN = {"name": "storage", "address": "192.0.2.10"}
NAMES = ("model-revision-pinned", "model-token-secret", "model-downloader-not-at-boot")
ALL = [model.validate_revision_pinned, model.validate_token_secret, model.validate_not_at_boot]


@pytest.fixture(autouse=True)
def _relax():
    relax.reset()


def all_violations(args) -> list[str]:
    return [m for v in ALL for m in violations(v, args)]


def snapshot(revision=REV, **extra):
    props = {"conn": STORAGE_CONN, "repo_id": "org/tiny", "revision": revision, "unit": render.UNIT,
             "dest": f"/srv/ai/models/org/tiny/{revision}", "marker": "model_index.json", **extra}
    if revision is None:
        del props["revision"]
    return resource_args(model.SNAPSHOT, props, "model-snapshot")


def token(content=None, mode="0600", secret=True, path=render.TOKEN, **extra):
    content = Secret("hf_abc") if content is None else content
    return file_args(path, content, "model-downloader-token", conn=STORAGE_CONN, mode=mode, secret=secret,
                     **extra)


def unit(enabled=False, name=render.UNIT, content=None, **extra):
    props = {"conn": STORAGE_CONN, "name": name, "content": content or render.UNIT, "dropins": {},
             "active": False, "properties": {}, "triggers": {}, **extra}
    if enabled is not None:
        props["enabled"] = enabled
    return resource_args(SYSTEMD_UNIT, props, "model-downloader-unit")


# ---- the pack and what it mirrors -----------------------------------------------------------

def test_registered_and_mandatory():
    levels = declared_levels()
    for name in NAMES:
        assert name in VALIDATORS and DESCRIPTIONS[name]
        assert levels[name] == "mandatory"
    assert [VALIDATORS[n] for n in NAMES] == ALL


def test_constants_mirror_the_program():
    assert model.TOKEN == render.TOKEN and model.UNIT == render.UNIT
    assert model.SNAPSHOT == f"pulumi-python:{Snapshot._resource_type_name}" == "pulumi-python:dynamic/model:Snapshot"


def test_the_layers_own_resources_pass():
    """As the component declares them: the pinned commit, the token as a secret 0600 file, the
    unit disabled and inactive."""
    assert all_violations(snapshot()) == []
    assert all_violations(token()) == []
    assert all_violations(unit()) == []


# ---- model-revision-pinned ------------------------------------------------------------------

@pytest.mark.parametrize("revision", ["main", "v1.0", "0123abc", REV[:39], REV + "0", "refs/pr/1", ""])
def test_a_revision_that_is_not_a_commit(revision):
    assert violations(model.validate_revision_pinned, snapshot(revision)) == [
        f'Snapshot "model-snapshot" (org/tiny on storage) has revision {revision!r}, which is not a 40-hex '
        "commit id: a branch or a tag is a name the hub can move, so the same stack would publish other "
        "weights under the same path; set gpu-fleet:model_snapshot.revision to the 40-hex commit id the "
        "revision resolves to today."]


def test_an_upper_case_commit():
    [m] = violations(model.validate_revision_pinned, snapshot(REV.upper()))
    assert f"has revision {REV.upper()!r}, which has upper-case hex digits" in m


def test_no_revision_is_refused():
    [m] = violations(model.validate_revision_pinned, snapshot(None))
    assert m.startswith('Snapshot "model-snapshot" (org/tiny on storage) has no revision, which is not')


def test_a_secret_revision_is_read():
    assert violations(model.validate_revision_pinned, snapshot(Secret(REV))) == []
    assert len(violations(model.validate_revision_pinned, snapshot(Secret("main")))) == 1


def test_an_unknown_revision_is_skipped():
    assert violations(model.validate_revision_pinned, snapshot(UNKNOWN_STR)) == []


def test_only_snapshots_are_judged():
    """A File or another check with a `revision` input is none of this policy's business."""
    props = {"conn": STORAGE_CONN, "revision": "main"}
    for rtype in (FILE, "pulumi-python:dynamic/model:SnapshotView", "pulumi-python:dynamic/host:Snapshot"):
        assert violations(model.validate_revision_pinned, resource_args(rtype, props)) == [], rtype


# ---- model-token-secret ---------------------------------------------------------------------

WHO = 'File "model-downloader-token" (/etc/gpu-fleet/model-snapshot.token on storage)'


def test_a_plain_text_token():
    assert violations(model.validate_token_secret, token(content="hf_plain")) == [
        f"{WHO} holds the hub token as a plain string, which Pulumi would store unencrypted in the state; "
        "set it with `pulumi config set --secret gpu-fleet:hf_token` and pass it as a Pulumi secret."]


def test_a_token_not_declared_secret():
    assert violations(model.validate_token_secret, token(secret=False)) == [
        f"{WHO} holds the hub token but is not declared secret=True, so it would not be masked in command "
        "logs; set secret=True."]


@pytest.mark.parametrize("mode", ["0644", "0640", "0604", "0660", "0777", "644", "rw-r--r--"])
def test_a_token_others_may_read(mode):
    assert violations(model.validate_token_secret, token(mode=mode)) == [
        f"{WHO} holds the hub token but its mode {mode} lets other users read it; set mode to 0600."]


def test_the_file_default_mode_is_refused():
    """A mode left out (None) is the File primitive's default, 0644."""
    assert violations(model.validate_token_secret, token(mode=None)) == [
        f"{WHO} holds the hub token but its mode 0644 lets other users read it; set mode to 0600."]


@pytest.mark.parametrize("mode", ["0600", "600", "0400"])
def test_owner_only_modes_pass(mode):
    assert violations(model.validate_token_secret, token(mode=mode)) == []


def test_every_problem_at_once_and_a_path_spelled_otherwise():
    got = violations(model.validate_token_secret,
                     token(content="hf_plain", secret=False, mode="0644", path="/etc/gpu-fleet//model-snapshot.token"))
    assert len(got) == 3 and all(m.startswith(f"{WHO} holds the hub token ") for m in got)
    assert ["as a plain string" in got[0], "not declared secret=True" in got[1], "mode 0644" in got[2]] == [True] * 3


def test_unknown_values_are_skipped():
    assert violations(model.validate_token_secret, token(content=Secret(UNKNOWN_STR), secret=UNKNOWN_BOOL,
                                                         mode=UNKNOWN_STR)) == []
    assert violations(model.validate_token_secret, token(content=UNKNOWN_STR)) == []


def test_other_files_are_not_the_token():
    for path in (render.CONFIG, "/etc/gpu-fleet/model-snapshot.token.bak", "/root/model-snapshot.token"):
        assert violations(model.validate_token_secret, token(content="x", secret=False, mode="0644", path=path)) == []
    # the layer's config names the token file, in plain text, and passes
    assert all_violations(file_args(render.CONFIG, '{"token_file": "/etc/gpu-fleet/model-snapshot.token"}\n',
                                    "model-downloader-config", conn=STORAGE_CONN)) == []


# ---- model-downloader-not-at-boot -----------------------------------------------------------

UNIT_WHO = 'SystemdUnit "model-downloader-unit" (gpu-fleet-model-download.service on storage)'
FIX = ("a boot of the storage host would start a model download outside any rollout; declare it with "
       "enabled=False (the layer's Snapshot starts it during `pulumi up`).")


def test_an_enabled_download_unit():
    assert violations(model.validate_not_at_boot, unit(enabled=True)) == [f"{UNIT_WHO} is enabled: {FIX}"]


def test_a_download_unit_that_does_not_say():
    """The primitive's default is enabled."""
    assert violations(model.validate_not_at_boot, unit(enabled=None)) == [
        f"{UNIT_WHO} does not declare enabled=False (a SystemdUnit is enabled by default): {FIX}"]


def test_a_download_unit_enabled_by_another_spelling():
    assert violations(model.validate_not_at_boot, unit(enabled="yes")) == [f"{UNIT_WHO} has enabled='yes': {FIX}"]


def test_an_unknown_enablement_is_skipped():
    assert violations(model.validate_not_at_boot, unit(enabled=UNKNOWN_BOOL)) == []


def test_other_units_may_be_enabled():
    for name in ("slurmd.service", "gpu-fleet-model-download.timer", "mnt-models.mount"):
        assert violations(model.validate_not_at_boot, unit(enabled=True, name=name)) == [], name
