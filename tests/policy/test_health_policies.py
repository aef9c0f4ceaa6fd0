"""The health policies, called directly: the layer's own files and slurm.conf pass; a program or
config another user could write, a HealthCheckProgram or RebootProgram the stack does not ship,
and unbounded reboots fail with a sentence naming the resource and the fix."""

from __future__ import annotations

import pytest

from components.config.load import parse_fleet_config
from components.layers.health import config as health_config
from components.layers.health import render
from components.layers.slurm.render import render_slurm_conf
from components.layers.slurm.scheduling import Scheduling
from tests.conftest import stack_config
from tests.unit.health.test_spares import SPARES, conf_of, three_nodes
from components.layers.health.config import SPARE_WEIGHT

from gpu_fleet_policies import health, relax, stackconfig
from gpu_fleet_policies.pack import DESCRIPTIONS, VALIDATORS, declared_levels

from .fakes import CONN, FILE, file_args, policy_resource, resource_args, stack_args, violations


@pytest.fixture(autouse=True)
def _reset():
    relax.reset()
    stackconfig.configure(None)
    yield
    stackconfig.configure(None)


def payload(path, mode="0755", owner="root", group="root", name="gpu01-healthcheck"):
    return {"conn": CONN, "path": path, "source": "/x", "source_sha256": "0" * 64, "mode": mode, "owner": owner,
            "group": group, "validate": None, "secret": False, "sha256": None, "present": None}, name


def slurm_conf(**health_over) -> str:
    raw = stack_config("canary")
    raw["gpu-fleet:health"] = {"enabled": True, **health_over}
    cfg = parse_fleet_config(raw, "canary")
    sched = Scheduling(title="node health (gpu-fleet:health)", lines=render.slurm_lines(cfg.health))
    return render_slurm_conf(cfg.slurm, cfg.hosts.controller, cfg.slurm_nodes(), acceptance=True, scheduling=sched)


def test_registered_and_mirrors_the_layer():
    for name in ("health-programs-root-only", "health-programs-shipped", "health-reboots-bounded",
                 "health-spares-kept-spare"):
        assert DESCRIPTIONS[name] and declared_levels()[name] == "mandatory"
    assert VALIDATORS["health-programs-root-only"] is health.validate_programs_root_only
    assert (health.HEALTHCHECK, health.REBOOT, health.CONFIG) == (render.HEALTHCHECK, render.REBOOT, render.CONFIG)
    assert health.MAX_REBOOTS_PER_DAY == health_config.MAX_REBOOTS_PER_DAY


@pytest.mark.parametrize("path, mode", [(render.HEALTHCHECK, "0755"), (render.REBOOT, "0755"), (render.CONFIG, "0644")])
def test_the_layers_files_pass(path, mode):
    props, name = payload(path, mode)
    assert violations(health.validate_programs_root_only, resource_args(health.PAYLOAD, props, name)) == []
    assert violations(health.validate_programs_root_only, file_args(path, "{}", mode=mode)) == []


@pytest.mark.parametrize("over, words", [
    ({"mode": "0775"}, "writable by its group or others"),
    ({"mode": "0757"}, "writable by its group or others"),
    ({"owner": "slurm"}, "owned by slurm:root"),
    ({"group": "users"}, "owned by root:users"),
])
def test_a_program_another_user_could_write_fails(over, words):
    props, name = payload(render.HEALTHCHECK)
    props.update(over)
    got = violations(health.validate_programs_root_only, resource_args(health.PAYLOAD, props, name))
    assert len(got) == 1 and words in got[0] and "/opt/gpu-fleet/bin/gpu-fleet-healthcheck on gpu01" in got[0], got


def test_other_files_are_not_its_business():
    assert violations(health.validate_programs_root_only, file_args("/etc/motd", "x", mode="0666")) == []


def conf_resource(text: str):
    return policy_resource(FILE, {"conn": CONN, "path": "/etc/slurm/slurm.conf", "content": text, "mode": "0644",
                                  "owner": "root", "group": "root", "validate": None, "secret": False},
                           "gpu01-slurm-conf")


def test_slurm_conf_programs_must_be_shipped_root_owned():
    text = slurm_conf()
    shipped = [policy_resource(health.PAYLOAD, *payload(p, name=f"gpu01-{i}")) for i, p in
               enumerate((render.HEALTHCHECK, render.REBOOT))]
    assert violations(health.validate_programs_shipped, stack_args(conf_resource(text), *shipped)) == []
    got = violations(health.validate_programs_shipped, stack_args(conf_resource(text), shipped[0]))
    assert len(got) == 1 and "RebootProgram=/opt/gpu-fleet/bin/gpu-fleet-reboot" in got[0], got
    loose = policy_resource(health.PAYLOAD, *payload(render.REBOOT, mode="0777", name="gpu01-r"))
    got = violations(health.validate_programs_shipped, stack_args(conf_resource(text), shipped[0], loose))
    assert len(got) == 1 and "RebootProgram" in got[0], got
    elsewhere = text.replace(render.HEALTHCHECK, "/tmp/check")
    got = violations(health.validate_programs_shipped, stack_args(conf_resource(elsewhere), *shipped))
    assert len(got) == 1 and "HealthCheckProgram=/tmp/check" in got[0], got
    # a slurm.conf without the loop is not its business
    assert violations(health.validate_programs_shipped, stack_args(conf_resource(
        "\n".join(x for x in text.splitlines() if "Program=" not in x)))) == []


def test_reboots_are_bounded():
    text = slurm_conf()
    assert violations(health.validate_reboots_bounded, stack_args(conf_resource(text))) == []
    got = violations(health.validate_reboots_bounded, stack_args(conf_resource(
        "\n".join(x for x in text.splitlines() if not x.startswith("ResumeTimeout=")))))
    assert len(got) == 1 and "no ResumeTimeout" in got[0], got
    stackconfig.configure({"gpu-fleet:health": {"enabled": True, "max_reboots_per_day": 12}})
    got = violations(health.validate_reboots_bounded, stack_args(conf_resource(text)))
    assert len(got) == 1 and "max_reboots_per_day is 12" in got[0], got


# ---- spares --------------------------------------------------------------------------------------------

@pytest.fixture
def spares_config():
    stackconfig.configure({"gpu-fleet:health": {"enabled": True, "spares": SPARES}})


def test_the_spares_policy_passes_the_layers_slurm_conf(spares_config):
    assert violations(health.validate_spares_kept_spare, stack_args(conf_resource(conf_of(three_nodes())))) == []


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.replace("Nodes=gpu01,gpu02 Default=YES", "Nodes=gpu01,gpu02,gpu03 Default=YES"),
     "the spares ['gpu03'] are in the default partition canary"),
    (lambda c: c.replace(f" Weight={SPARE_WEIGHT}", ""), "the spare gpu03 has Weight=1, not more than another"),
])
def test_the_spares_policy_fails_a_spare_used_like_any_node(spares_config, edit, words):
    found = violations(health.validate_spares_kept_spare, stack_args(conf_resource(edit(conf_of(three_nodes())))))
    assert len(found) == 1 and words in found[0], found
