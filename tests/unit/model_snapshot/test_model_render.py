"""Golden files for the model snapshot layer's renderers; regenerate with GPU_FLEET_UPDATE_GOLDEN=1.

The unit runs download, proof, check and publish as separate ExecStart lines (the first that
fails stops the unit), on the paths `Places` computes, and never at boot; the downloader's
config names the token file, never the token."""

from __future__ import annotations

import dataclasses
import json

import pytest

from components.config.load import parse_fleet_config
from components.layers.model_snapshot import render
from components.layers.model_snapshot.render import Places, render_config, render_unit
from tests.conftest import stack_config
from tests.unit.slurm.test_slurm_render import check_golden

REV = "0123456789abcdef0123456789abcdef01234567"
TOKEN_VALUE = "hf_ThisIsTheStacksSecretToken0123"


def model_cfg(storage: dict | None = None, **model):
    raw = stack_config("canary")
    raw["gpu-fleet:storage"] = {"enabled": True, "clients": "192.0.2.0/24", **(storage or {})}
    raw["gpu-fleet:model_snapshot"] = {"enabled": True, "repo_id": "org/tiny-model", "revision": REV,
                                       "allow_patterns": ["*.json", "*.safetensors"], "expected_files": 7,
                                       **model}
    raw["gpu-fleet:hf_token"] = TOKEN_VALUE  # what the stack holds; the renderers never see it
    return parse_fleet_config(raw, "canary")


CFG = model_cfg()
OTHER = model_cfg({"models": {"dataset": "ai/m", "mountpoint": "/tank/m", "client_mount": "/mnt/m"}},
                  repo_id="Other/Model-2", revision="f" * 40, staging_dir="partial", max_workers=3,
                  timeout_s=600, endpoint="http://10.0.0.5:8900")


def places_text(p: Places) -> str:
    return json.dumps(dataclasses.asdict(p), indent=2, sort_keys=True) + "\n"


# ---- golden ---------------------------------------------------------------------------------

def test_golden_unit():
    check_golden("model.gpu-fleet-model-download.service", render_unit(CFG.model_snapshot, CFG.storage.models))


@pytest.mark.parametrize("token, name", [(False, "model.model-snapshot.json"),
                                         (True, "model.model-snapshot.token.json")])
def test_golden_config(token, name):
    check_golden(name, render_config(CFG.model_snapshot, CFG.storage.models, token))


def test_golden_places():
    check_golden("model.places.json", places_text(Places.of(CFG.model_snapshot, CFG.storage.models)))


# ---- contracts ------------------------------------------------------------------------------

def test_places():
    assert Places.of(CFG.model_snapshot, CFG.storage.models) == Places(
        stage=f"/srv/ai/models/.staging/org/tiny-model/{REV}",
        state=f"/srv/ai/models/.staging/org/tiny-model/{REV}.gpu-fleet",
        dest=f"/srv/ai/models/org/tiny-model/{REV}",
        client=f"/mnt/models/org/tiny-model/{REV}")
    p = Places.of(OTHER.model_snapshot, OTHER.storage.models)
    assert p.stage == f"/tank/m/partial/Other/Model-2/{'f' * 40}"
    assert p.dest == f"/tank/m/Other/Model-2/{'f' * 40}" and p.client == f"/mnt/m/Other/Model-2/{'f' * 40}"


@pytest.mark.parametrize("cfg", [CFG, OTHER], ids=["canary", "other"])
def test_staging_and_publish_are_on_the_models_dataset(cfg):
    """Publish is one rename: staging and the published path share the dataset's filesystem,
    and the state directory is not inside the tree that gets published."""
    p, mp = Places.of(cfg.model_snapshot, cfg.storage.models), cfg.storage.models.mountpoint
    assert p.stage.startswith(mp + "/") and p.dest.startswith(mp + "/") and p.state.startswith(mp + "/")
    assert not p.state.startswith(p.stage + "/") and not p.dest.startswith(p.stage + "/")
    assert p.client.removeprefix(cfg.storage.models.client_mount) == p.dest.removeprefix(mp)


@pytest.mark.parametrize("cfg", [CFG, OTHER], ids=["canary", "other"])
def test_config_contract(cfg):
    m, p = cfg.model_snapshot, Places.of(cfg.model_snapshot, cfg.storage.models)
    for token in (False, True):
        body = json.loads(render_config(cfg.model_snapshot, cfg.storage.models, token))
        assert body["_comment"] == render.HEADER
        assert (body["repo_id"], body["revision"], body["endpoint"]) == (m.repo_id, m.revision, m.endpoint)
        assert (body["stage"], body["state"]) == (p.stage, p.state)
        assert (body["max_workers"], body["attempts"]) == (m.max_workers, m.attempts)
        assert body["allow_patterns"] == m.allow_patterns
        assert body["token_file"] == (render.TOKEN if token else None)


@pytest.mark.parametrize("token", [False, True, TOKEN_VALUE])
def test_the_config_never_holds_the_token(token):
    """The token is a separate 0600 file; the config, written in plain text, only names it
    (even a caller that passes the value itself gets just the path)."""
    text = render_config(CFG.model_snapshot, CFG.storage.models, token)
    assert TOKEN_VALUE not in text and "hf_" not in text
    assert json.loads(text)["token_file"] == (render.TOKEN if token else None)


def test_config_is_stable():
    assert render_config(CFG.model_snapshot, CFG.storage.models, True) == render_config(model_cfg().model_snapshot, model_cfg().storage.models, True)
    assert render_config(CFG.model_snapshot, CFG.storage.models, True) != render_config(CFG.model_snapshot, CFG.storage.models, False)


def exec_starts(text: str) -> list[str]:
    return [line.removeprefix("ExecStart=") for line in text.splitlines() if line.startswith("ExecStart=")]


@pytest.mark.parametrize("cfg", [CFG, OTHER], ids=["canary", "other"])
def test_unit_contract(cfg):
    m, p, text = cfg.model_snapshot, Places.of(cfg.model_snapshot, cfg.storage.models), render_unit(cfg.model_snapshot, cfg.storage.models)
    assert text.startswith(f"# {render.HEADER}\n") and text.endswith("\n")
    lines = text.splitlines()
    assert "Type=oneshot" in lines and f"TimeoutStartSec={m.timeout_s}" in lines
    assert f"RequiresMountsFor={cfg.storage.models.mountpoint}" in lines
    # never at boot: no [Install] section a `systemctl enable` could act on
    assert "[Install]" not in lines and not any(line.startswith(("WantedBy=", "RequiredBy=", "Alias=")) for line in lines)
    py = f"{render.VENV}/bin/python"
    download, manifest, check, publish = exec_starts(text)
    assert download == f"{py} {render.HOME}/download.py {render.CONFIG}"
    assert manifest.startswith(f"{py} {render.HOME}/verify.py manifest --root {p.stage} ")
    assert f"--expected {p.state}/expected.json" in manifest and f"--out {p.state}/manifest.json" in manifest
    assert f"--repo {m.repo_id} --revision {m.revision}" in manifest and f"--workers {m.max_workers}" in manifest
    assert check == f"{py} {render.HOME}/verify.py check --root {p.stage} --manifest {p.state}/manifest.json"
    assert publish == f"/bin/sh {render.HOME}/publish.sh {p.stage} {p.state} {p.dest}"
    # nothing systemd would expand or split differently from what the unit means
    assert "%" not in text and "$" not in text and "\\" not in text


def test_unit_never_holds_the_token():
    assert TOKEN_VALUE not in render_unit(CFG.model_snapshot, CFG.storage.models) and "hf_" not in render_unit(CFG.model_snapshot, CFG.storage.models)
