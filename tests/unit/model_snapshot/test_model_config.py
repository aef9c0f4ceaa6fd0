"""The model snapshot layer's config: a pinned 40-hex commit, a hub repository id, an endpoint
without credentials, the fields the layer needs, the storage layer to publish on, and the hub
token read only as a Pulumi secret."""

from __future__ import annotations

import pytest

from components.config.load import parse_fleet_config
from components.config.project import SECRET_KEYS
from components.layers.model_snapshot.config import ModelSnapshotLayer
from components.errors import ConfigError
from components.stack_secrets import optional_secret
from tests.unit.test_config import SRC, problems_of

REV = "0123456789abcdef0123456789abcdef01234567"
STORE = {"enabled": True, "clients": "192.0.2.0/24"}
MODEL = {"enabled": True, "repo_id": "org/tiny-model", "revision": REV}
REVISION = "gpu-fleet:model_snapshot.revision: "


@pytest.fixture
def model_config(canary_config):
    """The canary stack with storage and the model snapshot layer on."""
    canary_config["gpu-fleet:storage"] = dict(STORE)
    canary_config["gpu-fleet:model_snapshot"] = dict(MODEL)
    return canary_config


def with_model(raw: dict, **fields) -> dict:
    raw["gpu-fleet:model_snapshot"] = {**MODEL, **fields}
    return raw


def test_a_valid_section_parses(model_config):
    model_config["gpu-fleet:model_snapshot"].update(
        allow_patterns=["*.json", "unet/*.safetensors"], expected_files=7, expected_bytes=123456,
        endpoint="http://10.0.0.5:8900/hub", max_workers=16, marker="unet/config.json",
        packages={"python3-venv": "3.11.2-1+b1"})
    m = parse_fleet_config(model_config, SRC).model_snapshot
    assert (m.enabled, m.repo_id, m.revision) == (True, "org/tiny-model", REV)
    assert m.allow_patterns == ["*.json", "unet/*.safetensors"]
    assert (m.expected_files, m.expected_bytes, m.max_workers) == (7, 123456, 16)
    assert (m.endpoint, m.marker) == ("http://10.0.0.5:8900/hub", "unet/config.json")
    assert m.packages == {"python3-venv": "3.11.2-1+b1"}


def test_defaults(model_config):
    m = parse_fleet_config(model_config, SRC).model_snapshot
    assert (m.endpoint, m.staging_dir, m.marker) == ("https://huggingface.co", ".staging", "model_index.json")
    assert (m.max_workers, m.attempts, m.timeout_s) == (8, 3, 6 * 3600)
    assert m.allow_patterns == [] and m.expected_files is None and m.packages == {}


def test_off_by_default(canary_config):
    cfg = parse_fleet_config(canary_config, SRC)
    assert cfg.model_snapshot == ModelSnapshotLayer() and cfg.model_snapshot.enabled is False


def test_the_section_is_no_longer_refused_as_not_built(model_config):
    """The layer landed: its section parses instead of being refused as a layer to come."""
    assert parse_fleet_config(model_config, SRC).model_snapshot.enabled


@pytest.mark.parametrize("revision, why", [
    ("main", "is a branch, a tag or a short id"),
    ("v1.0", "is a branch, a tag or a short id"),
    ("refs/pr/1", "is a branch, a tag or a short id"),
    ("0123abc", "is a branch, a tag or a short id"),
    (REV[:39], "is a branch, a tag or a short id"),
    (REV + "0", "is a branch, a tag or a short id"),
    (REV.upper(), "has upper-case hex digits"),
    ("0123456789abcdeF0123456789abcdef01234567", "has upper-case hex digits"),
])
def test_a_revision_that_is_not_a_commit_is_refused(model_config, revision, why):
    [p] = problems_of(with_model(model_config, revision=revision))
    assert p.startswith(f"{REVISION}{revision!r} {why}"), p
    if "branch" in why:
        assert "pin the 40-hex commit id" in p


def test_a_branch_is_refused_even_with_the_layer_off(model_config):
    """A section that says `main` is wrong whether or not it runs today."""
    [p] = problems_of(with_model(model_config, enabled=False, revision="main"))
    assert p.startswith(f"{REVISION}'main' is a branch")


@pytest.mark.parametrize("repo_id", [
    "model", "org/model/extra", "org model/x", "org/../etc", "org/..", "../org/x", "-org/model",
    "org/.hidden", "org--x/model", "org/model;rm -rf /", "org/mo$del", "o" * 97 + "/model", "/model",
])
def test_a_bad_repo_id_is_refused(model_config, repo_id):
    [p] = problems_of(with_model(model_config, repo_id=repo_id))
    assert p.startswith("gpu-fleet:model_snapshot.repo_id: ") and " is not a Hugging Face repository id" in p, p


@pytest.mark.parametrize("repo_id", ["org/model", "Org_1/Model-2.5.b", "a/b", "o" * 96 + "/m"])
def test_good_repo_ids(model_config, repo_id):
    assert parse_fleet_config(with_model(model_config, repo_id=repo_id), SRC).model_snapshot.repo_id == repo_id


@pytest.mark.parametrize("endpoint", [
    "https://user:pw@host", "https://token@hf.example", "https://hf.example/?token=abc",
    "https://hf.example/x?a=1", "https://hf.example/#frag", "ftp://hf.example", "hf.example",
    "https://hf example", "https://hf.example/\nX-Header: 1", "file:///srv/mirror", "",
])
def test_a_bad_endpoint_is_refused(model_config, endpoint):
    [p] = problems_of(with_model(model_config, endpoint=endpoint))
    assert p.startswith("gpu-fleet:model_snapshot.endpoint: "), p


@pytest.mark.parametrize("endpoint", ["https://huggingface.co", "http://10.0.0.5:8900",
                                      "https://hf-mirror.example.org/api/", "http://[2001:db8::1]:8080"])
def test_good_endpoints(model_config, endpoint):
    assert parse_fleet_config(with_model(model_config, endpoint=endpoint), SRC).model_snapshot.endpoint == endpoint


def test_repo_id_and_revision_are_required_when_enabled(model_config):
    model_config["gpu-fleet:model_snapshot"] = {"enabled": True}
    assert problems_of(model_config) == [
        "gpu-fleet:model_snapshot.repo_id: required when the layer is enabled",
        "gpu-fleet:model_snapshot.revision: required when the layer is enabled",
    ]
    model_config["gpu-fleet:model_snapshot"] = {"enabled": True, "repo_id": "org/m"}
    assert problems_of(model_config) == ["gpu-fleet:model_snapshot.revision: required when the layer is enabled"]


def test_a_disabled_section_needs_neither(model_config):
    model_config["gpu-fleet:model_snapshot"] = {"enabled": False}
    assert parse_fleet_config(model_config, SRC).model_snapshot.repo_id is None


def test_the_layer_needs_the_storage_layer(model_config):
    del model_config["gpu-fleet:storage"]
    [p] = problems_of(model_config)
    assert p.startswith("gpu-fleet:model_snapshot: needs the storage layer (storage.enabled)"), p
    model_config["gpu-fleet:storage"] = {**STORE, "enabled": False}
    assert problems_of(model_config) == [p]
    # with the layer off, storage may be off too
    model_config["gpu-fleet:model_snapshot"]["enabled"] = False
    parse_fleet_config(model_config, SRC)


@pytest.mark.parametrize("field, value", [
    ("allow_patterns", ["*.json", "a b"]), ("allow_patterns", ["$(id)"]), ("staging_dir", ".."),
    ("staging_dir", "a/b"), ("max_workers", 0), ("max_workers", 65), ("attempts", 0),
    ("timeout_s", 10), ("expected_files", 0), ("expected_bytes", -1), ("marker", "a b"),
    ("packages", {"python3-venv": "*"}), ("mirror", "x"),
])
def test_other_bad_fields_name_the_field(model_config, field, value):
    got = problems_of(with_model(model_config, **{field: value}))
    assert len(got) == 1 and got[0].startswith(f"gpu-fleet:model_snapshot.{field}"), got


def test_problems_are_listed_together(model_config):
    """Every problem of the section at once, each naming its field."""
    model_config["gpu-fleet:model_snapshot"] = {"enabled": True, "repo_id": "model", "revision": "main",
                                                 "endpoint": "https://u:p@h"}
    got = problems_of(model_config)
    assert sorted(p.split(":")[1].split()[0] for p in got) == [
        "model_snapshot.endpoint", "model_snapshot.repo_id", "model_snapshot.revision"]


# ---- the hub token ---------------------------------------------------------------------------

def test_hf_token_is_a_stack_secret_key(model_config):
    """The parser leaves it to the layer (as the other secrets), not as an unknown field."""
    assert "hf_token" in SECRET_KEYS
    model_config["gpu-fleet:hf_token"] = "hf_notatokenatall"
    cfg = parse_fleet_config(model_config, SRC)
    assert "hf_notatokenatall" not in cfg.model_dump_json()


def test_a_key_outside_the_secret_keys_is_unknown(model_config):
    model_config["gpu-fleet:hf_tokn"] = "hf_x"
    assert problems_of(model_config) == ["gpu-fleet:hf_tokn: unknown field"]


@pytest.fixture
def engine_config():
    from pulumi.runtime.config import set_all_config

    yield set_all_config
    set_all_config({}, [])


def test_optional_secret(engine_config):
    engine_config({}, [])
    assert optional_secret("hf_token", SRC) is None  # not set: the repository needs none
    engine_config({"gpu-fleet:hf_token": "hf_plaintexttoken"}, [])
    with pytest.raises(ConfigError) as exc:
        optional_secret("hf_token", SRC)
    assert exc.value.problems == ["gpu-fleet:hf_token: stored in plain text; set it with "
                                  "`pulumi config set --secret`"]
    assert "hf_plaintexttoken" not in str(exc.value)
    engine_config({"gpu-fleet:hf_token": "hf_secrettoken"}, ["gpu-fleet:hf_token"])
    out = optional_secret("hf_token", SRC)
    assert out is not None and "hf_secrettoken" not in repr(out)


def test_an_endpoint_with_credentials_is_refused_without_quoting_them(model_config):
    got = problems_of(with_model(model_config, endpoint="https://alice:s3cret-pw@hub.example"))
    assert got == ["gpu-fleet:model_snapshot.endpoint: holds credentials (user:password@); give the hub "
                   "token as the secret gpu-fleet:hf_token instead"]
    assert "s3cret" not in " ".join(got)


@pytest.mark.parametrize("marker", ["../../etc/shadow", "/etc/passwd", "*.json", "a/[x]", "a//b"])
def test_a_marker_outside_the_snapshot_or_a_pattern_is_refused(model_config, marker):
    got = problems_of(with_model(model_config, marker=marker))
    assert len(got) == 1 and got[0].startswith("gpu-fleet:model_snapshot.marker: "), got


def test_a_nested_marker_is_fine(model_config):
    cfg = parse_fleet_config(with_model(model_config, marker="transformer/config.json"), SRC)
    assert cfg.model_snapshot.marker == "transformer/config.json"


def test_staging_named_like_the_repos_owner_is_refused(model_config):
    got = problems_of(with_model(model_config, repo_id="stage/model", staging_dir="stage"))
    assert got == ["gpu-fleet:model_snapshot.staging_dir: 'stage' is also the owner of repo_id 'stage/model'; "
                   "published snapshots would land inside the staging tree"]
