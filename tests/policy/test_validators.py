"""Each policy's validator, called directly: compliant passes, violating fails, and missing or
unknown-during-preview values are skipped without crashing."""

from __future__ import annotations

import pytest

from components.config.load import parse_fleet_config
from components.layers.slurm.render import render_cgroup_conf, render_gres_conf, render_slurm_conf
from tests.conftest import fleet14, stack_config

from gpu_fleet_policies import engine, exposure, hosts, identities, k3s, packages, relax, secrets, slurm
from gpu_fleet_policies import stackconfig
from gpu_fleet_policies.pack import DESCRIPTIONS, VALIDATORS, declared_levels, policies
from gpu_fleet_policies.props import UNKNOWN, snapshot

from . import fakes
from .fakes import (
    ACCOUNT, CONN, FILE, HOST, PACKAGE_SET, SYSTEMD_UNIT, UNKNOWN_BOOL, UNKNOWN_NUM, UNKNOWN_OBJ,
    UNKNOWN_STR, Secret, file_args, policy_resource, resource_args, stack_args, violations,
)


@pytest.fixture(autouse=True)
def _clean_state():
    relax.reset()
    stackconfig.configure(None)
    yield
    relax.reset()
    stackconfig.configure(None)


#: stacks that parse: canary, and the full fleet once K3s retirement has handed its nodes over
VALID_STACKS = {"canary": lambda: stack_config("canary"), "full": fleet14}


def cfg(stack: str):
    return parse_fleet_config(VALID_STACKS[stack](), stack)


CANARY = cfg("canary")
CANARY_SLURM = render_slurm_conf(CANARY.slurm, CANARY.hosts.controller, CANARY.slurm_nodes(),
                                 acceptance=CANARY.acceptance.enabled, accounting_host="storage")
CANARY_CGROUP = render_cgroup_conf(cfg("canary").slurm)
SLURM_POLICIES = [slurm.validate_cgroup_confinement, slurm.validate_cgroup_plugins,
                  slurm.validate_no_root_jobs, slurm.validate_munge_auth, slurm.validate_typed_gres,
                  slurm.validate_gpu_accounting]
RESOURCE_POLICIES = SLURM_POLICIES + [
    packages.validate_exact_versions, packages.validate_held, secrets.validate_content_is_secret,
    secrets.validate_private_mode, exposure.validate_mariadb_loopback,
    exposure.validate_slurmrestd_unix_socket]


def all_violations(args) -> list[str]:
    return [m for v in RESOURCE_POLICIES for m in violations(v, args)]


# ---- the pack ------------------------------------------------------------------------------

def test_pack_declares_every_policy_mandatory_but_the_report():
    pols = {p.name: p for p in policies()}
    assert set(pols) == set(VALIDATORS)
    assert {n for n, lvl in declared_levels().items() if lvl != "mandatory"} == {relax.REPORT_POLICY}
    for p in pols.values():
        assert p.description == DESCRIPTIONS[p.name]
        assert p.description.endswith(".")


def test_engine_patch_points():
    assert engine.patch_points() == []


def test_secret_marking_deserializer_keeps_secrets_and_unknowns():
    from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY
    from pulumi_policy.proxy import unknown_checking_proxy
    import pulumi_policy.policy as sdk

    sdk_own = getattr(sdk.deserialize_properties, "__wrapped__", sdk.deserialize_properties)  # installed or not
    deserialize = engine._secret_marking_deserialize(sdk_own)
    wire = {
        "content": {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": "key-material"},
        "later": {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": UNKNOWN_STR},
        "plain": "text",
        "nested": {"list": [1.0, {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": "x"}], "u": UNKNOWN_NUM},
    }
    snap = snapshot(unknown_checking_proxy(deserialize(wire)))
    assert isinstance(snap["content"], Secret) and snap["content"].value == "key-material"
    assert isinstance(snap["later"], Secret) and snap["later"].value is UNKNOWN
    assert snap["plain"] == "text"
    assert snap["nested"]["u"] is UNKNOWN
    assert isinstance(snap["nested"]["list"][1], Secret)
    # The SDK's own deserializer (unpatched) loses secret-ness: the reason for the patch.
    assert sdk_own(wire)["content"] == "key-material"


# ---- Slurm ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", ["canary", "full"])
@pytest.mark.parametrize("accounting", [None, "storage"])
@pytest.mark.parametrize("plugin", ["autodetect", "cgroup/v1", "cgroup/v2"])
def test_rendered_slurm_files_pass_every_policy(stack, accounting, plugin):
    raw = VALID_STACKS[stack]()
    raw["gpu-fleet:slurm"]["cgroup_plugin"] = plugin
    fleet = parse_fleet_config(raw, stack)
    for path, text in [("/etc/slurm/slurm.conf", render_slurm_conf(
                           fleet.slurm, fleet.hosts.controller, fleet.slurm_nodes(),
                           acceptance=fleet.acceptance.enabled, accounting_host=accounting)),
                       ("/etc/slurm/gres.conf", render_gres_conf(fleet.slurm, fleet.slurm_nodes())),
                       ("/etc/slurm/cgroup.conf", render_cgroup_conf(fleet.slurm))]:
        assert all_violations(file_args(path, text)) == [], path


def test_no_root_jobs():
    bad = CANARY_SLURM.replace("DisableRootJobs=YES", "DisableRootJobs=NO")
    msgs = violations(slurm.validate_no_root_jobs, file_args("/etc/slurm/slurm.conf", bad, "slurm-conf"))
    assert msgs == ['File "slurm-conf" (/etc/slurm/slurm.conf on gpu01) sets DisableRootJobs=NO, so '
                    "root may run jobs on the cluster; set DisableRootJobs=YES."]
    unset = CANARY_SLURM.replace("DisableRootJobs=YES", "")
    assert "does not set DisableRootJobs" in violations(
        slurm.validate_no_root_jobs, file_args("/etc/slurm/slurm.conf", unset))[0]
    # case-insensitive keys and values, comments ignored, the last setting wins
    ok = "disablerootjobs=yes # comment\n"
    assert violations(slurm.validate_no_root_jobs, file_args("/etc/slurm-llnl/slurm.conf", ok)) == []
    later = "DisableRootJobs=YES\nDisableRootJobs=NO\n"
    assert violations(slurm.validate_no_root_jobs, file_args("/etc/slurm/slurm.conf", later))
    commented = "#DisableRootJobs=YES\n"
    assert violations(slurm.validate_no_root_jobs, file_args("/etc/slurm/slurm.conf", commented))


def test_cgroup_confinement():
    ok = file_args("/etc/slurm/cgroup.conf", CANARY_CGROUP)
    assert violations(slurm.validate_cgroup_confinement, ok) == []
    bad = (CANARY_CGROUP.replace("ConstrainDevices=yes", "ConstrainDevices=no")
           .replace("AllowedSwapSpace=0", "AllowedSwapSpace=10").replace("ConstrainCores=yes\n", ""))
    msgs = violations(slurm.validate_cgroup_confinement, file_args("/etc/slurm/cgroup.conf", bad, "cg"))
    assert len(msgs) == 1
    m = msgs[0]
    assert m.startswith('File "cg" (/etc/slurm/cgroup.conf on gpu01) does not confine jobs: set ')
    assert "ConstrainDevices=yes (it has ConstrainDevices=no)" in m
    assert "ConstrainCores=yes (it is not set)" in m
    assert "ConstrainRAMSpace" not in m and "Swap" not in m


def test_swap_confinement_is_its_own_policy():
    ok = file_args("/etc/slurm/cgroup.conf", CANARY_CGROUP)
    assert violations(slurm.validate_swap_confinement, ok) == []
    bad = CANARY_CGROUP.replace("AllowedSwapSpace=0", "AllowedSwapSpace=10")
    [m] = violations(slurm.validate_swap_confinement, file_args("/etc/slurm/cgroup.conf", bad, "cg"))
    assert m.startswith('File "cg" (/etc/slurm/cgroup.conf on gpu01) lets jobs swap: set ')
    assert "AllowedSwapSpace=0 (it has AllowedSwapSpace=10)" in m
    lab = CANARY_CGROUP.replace("ConstrainSwapSpace=yes", "ConstrainSwapSpace=no")
    [m] = violations(slurm.validate_swap_confinement, file_args("/etc/slurm/cgroup.conf", lab, "cg"))
    assert "ConstrainSwapSpace=yes (it has ConstrainSwapSpace=no)" in m
    assert violations(slurm.validate_cgroup_confinement, file_args("/etc/slurm/cgroup.conf", lab)) == []


def test_cgroup_plugins():
    bad = CANARY_SLURM.replace("TaskPlugin=task/cgroup,task/affinity", "TaskPlugin=task/affinity")
    msgs = violations(slurm.validate_cgroup_plugins, file_args("/etc/slurm/slurm.conf", bad))
    assert len(msgs) == 1 and "TaskPlugin to include task/cgroup" in msgs[0]
    bad = CANARY_SLURM.replace("ProctrackType=proctrack/cgroup", "ProctrackType=proctrack/linuxproc")
    assert "ProctrackType=proctrack/cgroup" in violations(
        slurm.validate_cgroup_plugins, file_args("/etc/slurm/slurm.conf", bad))[0]


def test_munge_auth():
    bad = CANARY_SLURM.replace("AuthType=auth/munge", "AuthType=auth/none")
    msgs = violations(slurm.validate_munge_auth, file_args("/etc/slurm/slurm.conf", bad))
    assert len(msgs) == 1 and "sets AuthType=auth/none; set AuthType=auth/munge" in msgs[0]
    bad = CANARY_SLURM.replace("CredType=cred/munge", "CredType=cred/none")
    assert "CredType=cred/none" in violations(
        slurm.validate_munge_auth, file_args("/etc/slurm/slurm.conf", bad))[0]
    unset = CANARY_SLURM.replace("AuthType=auth/munge", "")
    assert "does not set AuthType" in violations(
        slurm.validate_munge_auth, file_args("/etc/slurm/slurm.conf", unset))[0]


def test_typed_gres():
    bad = CANARY_SLURM.replace("Gres=gpu:v100:8", "Gres=gpu:8")
    msgs = violations(slurm.validate_typed_gres, file_args("/etc/slurm/slurm.conf", bad))
    assert len(msgs) == 1
    assert "gives node gpu01 the untyped GRES gpu:8; write it as gpu:<type>:<count>" in msgs[0]
    typed_forms = "GresTypes=gpu\nNodeName=a Gres=gpu:v100:4(S:0-1),gpu:a100:4,shard:8\nNodeName=b Gres=gpu:v100\n"
    assert violations(slurm.validate_typed_gres, file_args("/etc/slurm/slurm.conf", typed_forms)) == []
    no_types = "NodeName=a Gres=gpu:v100:4\n"
    assert "GresTypes does not list gpu" in violations(
        slurm.validate_typed_gres, file_args("/etc/slurm/slurm.conf", no_types))[0]
    gres_bad = "AutoDetect=nvml\nNodeName=gpu01 Name=gpu File=/dev/nvidia[0-7]\n"
    msgs = violations(slurm.validate_typed_gres, file_args("/etc/slurm/gres.conf", gres_bad))
    assert len(msgs) == 1 and "declares GPUs for node gpu01 without a Type" in msgs[0]


def test_gpu_accounting():
    bad = CANARY_SLURM.replace("AccountingStorageTRES=gres/gpu,gres/gpu:v100", "AccountingStorageTRES=gres/gpu")
    msgs = violations(slurm.validate_gpu_accounting, file_args("/etc/slurm/slurm.conf", bad))
    assert len(msgs) == 1
    assert "does not count gres/gpu:v100; set AccountingStorageTRES=gres/gpu,gres/gpu:v100" in msgs[0]
    gone = CANARY_SLURM.replace("AccountingStorageTRES=gres/gpu,gres/gpu:v100\n", "")
    assert "does not count gres/gpu, gres/gpu:v100" in violations(
        slurm.validate_gpu_accounting, file_args("/etc/slurm/slurm.conf", gone))[0]
    # accounting off: nothing to count
    no_acct = render_slurm_conf(CANARY.slurm, CANARY.hosts.controller, CANARY.slurm_nodes(),
                                acceptance=CANARY.acceptance.enabled)
    assert violations(slurm.validate_gpu_accounting, file_args("/etc/slurm/slurm.conf", no_acct)) == []
    none = bad.replace("accounting_storage/slurmdbd", "accounting_storage/none")
    assert violations(slurm.validate_gpu_accounting, file_args("/etc/slurm/slurm.conf", none)) == []


@pytest.mark.parametrize("content", [None, UNKNOWN_STR, Secret(UNKNOWN_STR), 42.0])
def test_slurm_policies_skip_missing_and_unknown_content(content):
    for path in ("/etc/slurm/slurm.conf", "/etc/slurm/cgroup.conf", "/etc/slurm/gres.conf"):
        assert all_violations(file_args(path, content)) == []


def test_resource_policies_ignore_other_resources_and_empty_props():
    for rtype in (FILE, PACKAGE_SET, SYSTEMD_UNIT, ACCOUNT, HOST, "gpu-fleet:index:Fleet"):
        assert all_violations(resource_args(rtype, {})) == []
    # a File elsewhere, or with an unknown path
    assert all_violations(file_args("/etc/motd", "DisableRootJobs=NO")) == []
    assert all_violations(file_args(UNKNOWN_STR, "DisableRootJobs=NO")) == []
    assert all_violations(resource_args(FILE, {"conn": UNKNOWN_OBJ, "path": UNKNOWN_STR,
                                                "content": UNKNOWN_STR})) == []


# ---- identities ----------------------------------------------------------------------------

def account(name: str, host: str, user: str, uid, gid):
    return policy_resource(ACCOUNT, {"conn": {"name": host, "address": "192.0.2.1"}, "name": user,
                                     "uid": uid, "gid": gid, "home": "/x", "shell": "/bin/false"}, name)


def test_service_ids_equal_everywhere():
    ok = stack_args(*(account(f"{u}-{h}", h, u, i, i) for h in ("storage", "gpu01", "gpu02")
                      for u, i in (("slurm", 64030.0), ("munge", 64031.0))),
                    account("other-gpu01", "gpu01", "postgres", 999.0, 999.0),
                    account("other-gpu02", "gpu02", "postgres", 998.0, 998.0))
    assert violations(identities.validate_service_ids, ok) == []


def test_service_ids_drift_names_the_odd_host():
    args = stack_args(account("slurm-storage", "storage", "slurm", 64030.0, 64030.0),
                      account("slurm-gpu01", "gpu01", "slurm", 64030.0, 64030.0),
                      account("slurm-gpu02", "gpu02", "slurm", 64099.0, 64030.0),
                      account("munge-gpu02", "gpu02", "munge", 64031.0, 64032.0),
                      account("munge-gpu01", "gpu01", "munge", 64031.0, 64031.0),
                      account("munge-storage", "storage", "munge", 64031.0, 64031.0))
    msgs = violations(identities.validate_service_ids, args)
    assert msgs == [
        'Account "slurm-gpu02" gives slurm uid 64099 on gpu02, but gpu01 and storage give it uid '
        "64030; set the same uid on every host (gpu-fleet:slurm.slurm_uid).",
        'Account "munge-gpu02" gives munge gid 64032 on gpu02, but gpu01 and storage give it gid '
        "64031; set the same gid on every host (gpu-fleet:slurm.munge_gid).",
    ]


def test_service_ids_missing_and_unknown():
    args = stack_args(account("slurm-a", "a", "slurm", 64030.0, 64030.0),
                      account("slurm-b", "b", "slurm", UNKNOWN_NUM, 64030.0),
                      account("slurm-c", "c", UNKNOWN_STR, 1.0, 1.0),
                      policy_resource(ACCOUNT, {}, "empty"),
                      account("munge-a", "a", "munge", None, 64031.0))
    msgs = violations(identities.validate_service_ids, args)
    assert msgs == ['Account "munge-a" (munge on a) has no fixed uid (got None); set uid to the '
                    "stack's fixed number (gpu-fleet:slurm.munge_uid)."]
    assert violations(identities.validate_service_ids, stack_args()) == []


# ---- packages ------------------------------------------------------------------------------

def pkgs(packages, hold=True, name="slurm-packages"):
    return resource_args(PACKAGE_SET, {"conn": CONN, "packages": packages, "hold": hold,
                                       "allow_downgrade": False}, name)


def test_exact_versions():
    ok = pkgs({"slurm-smd": "26.05.4-1+v1001", "munge": "0.5.15-2", "libc6": "2.36-9+deb12u4",
               "nvidia-driver": "1:580.173.02-1", "backport": "1.2~bpo12+1"})
    assert violations(packages.validate_exact_versions, ok) == []
    bad = pkgs({"a": "*", "b": "", "c": ">= 1.2", "d": "26.05.*", "e": "latest", "f": None,
                "g": "1.0 || 2.0", "h": "~1.2", "i": UNKNOWN_STR, "j": 5.0})
    msgs = violations(packages.validate_exact_versions, bad)
    assert len(msgs) == 9
    assert msgs[0] == ('PackageSet "slurm-packages" (on gpu01): package a has the wildcard version "*"; '
                       "pin it to one exact Debian version (as `apt-cache policy a` lists it) so "
                       "every host runs the same build.")
    joined = "\n".join(msgs)
    for frag in ("package b has an empty version", 'package c has the version range ">= 1.2"',
                 'package d has the wildcard version "26.05.*"', 'package e has the version "latest"',
                 "package f has no version", "package h has the version range", "package j has the version 5.0"):
        assert frag in joined
    assert "package i" not in joined  # unknown: skipped


def test_held():
    assert violations(packages.validate_held, pkgs({"a": "1.0-1"}, hold=True)) == []
    msgs = violations(packages.validate_held, pkgs({"b": "1.0-1", "a": "1.0-1"}, hold=False))
    assert msgs == ['PackageSet "slurm-packages" (on gpu01) does not hold a, b (hold=False); set '
                    "hold=True so a routine apt upgrade cannot replace the pinned versions."]
    assert violations(packages.validate_held, pkgs({"a": "1"}, hold=None)) == []  # default: held
    assert violations(packages.validate_held, pkgs({"a": "1"}, hold=UNKNOWN_BOOL)) == []


def test_packages_missing_and_unknown():
    for v in (packages.validate_exact_versions, packages.validate_held):
        assert violations(v, pkgs(UNKNOWN_OBJ, hold=UNKNOWN_BOOL)) == []
        assert violations(v, resource_args(PACKAGE_SET, {})) == []
        assert violations(v, pkgs(None)) == []


# ---- secrets -------------------------------------------------------------------------------

SECRET_PATHS = ["/etc/munge/munge.key", "/etc/slurm/slurmdbd.conf", "/etc/slurm/jwt_hs256.key"]


@pytest.mark.parametrize("path", SECRET_PATHS)
def test_secret_files_need_pulumi_secrets(path):
    ok = file_args(path, Secret("key-material"), mode="0600", secret=True)
    assert violations(secrets.validate_content_is_secret, ok) == []
    assert violations(secrets.validate_private_mode, ok) == []
    bad = file_args(path, "key-material", name="the-file", mode="0600", secret=True)
    msgs = violations(secrets.validate_content_is_secret, bad)
    assert len(msgs) == 1
    assert msgs[0].startswith(f'File "the-file" ({path} on gpu01) holds a secret (')
    assert "its content is a plain string" in msgs[0] and "pulumi.Output.secret" in msgs[0]


def test_any_file_declared_secret_or_setting_a_password():
    declared = file_args("/etc/gpu-fleet/token", "t0ken", mode="0600", secret=True)
    assert "declared secret=True" in violations(secrets.validate_content_is_secret, declared)[0]
    db = file_args("/etc/slurm/other.conf", "StoragePass=hunter2\n", mode="0600")
    assert "it sets StoragePass" in violations(secrets.validate_content_is_secret, db)[0]
    plain = file_args("/etc/slurm/slurm.conf", CANARY_SLURM)
    assert violations(secrets.validate_content_is_secret, plain) == []
    assert violations(secrets.validate_private_mode, plain) == []


def test_secret_files_private():
    msgs = violations(secrets.validate_private_mode,
                      file_args("/etc/munge/munge.key", Secret("k"), name="mk", mode="0644", secret=False))
    assert msgs == [
        'File "mk" (/etc/munge/munge.key on gpu01) holds a secret (the MUNGE key) but its mode 0644 '
        "lets other users read it; set mode to 0600 (or 0400).",
        'File "mk" (/etc/munge/munge.key on gpu01) holds a secret (the MUNGE key) but is not declared '
        "secret=True, so its content would not be masked in command logs; set secret=True.",
    ]
    for mode in ("0400", "600", "0600"):
        assert violations(secrets.validate_private_mode, file_args(
            "/etc/munge/munge.key", Secret("k"), mode=mode, secret=True)) == []
    assert "mode 0640" in violations(secrets.validate_private_mode, file_args(
        "/etc/munge/munge.key", Secret("k"), mode="0640", secret=True))[0]


@pytest.mark.parametrize("content", [UNKNOWN_STR, Secret(UNKNOWN_STR), None])
def test_secrets_missing_and_unknown(content):
    args = file_args("/etc/munge/munge.key", content, mode="0600", secret=True)
    assert violations(secrets.validate_content_is_secret, args) == []
    args = resource_args(FILE, {"path": "/etc/munge/munge.key", "content": content,
                                "mode": UNKNOWN_STR, "secret": UNKNOWN_BOOL})
    assert violations(secrets.validate_content_is_secret, args) == []
    assert violations(secrets.validate_private_mode, args) == []


# ---- network exposure ----------------------------------------------------------------------

MARIADB = "/etc/mysql/mariadb.conf.d/60-gpu-fleet.cnf"


def test_mariadb_loopback():
    for ok in ("[mysqld]\nbind-address = 127.0.0.1\n", "[mariadb]\nbind_address=::1\n",
               "[server]\nbind-address=localhost\n", "[mysqld]\nskip-networking\n",
               "[client]\nport=3306\n", "[mysqld]\nbind-address = 127.0.0.1 # loopback\n"):
        assert violations(exposure.validate_mariadb_loopback, file_args(MARIADB, ok)) == [], ok
    msgs = violations(exposure.validate_mariadb_loopback,
                      file_args(MARIADB, "[mysqld]\nbind-address = 0.0.0.0\n", "mariadb-cnf"))
    assert msgs == [f'File "mariadb-cnf" ({MARIADB} on gpu01) binds the MariaDB server to 0.0.0.0, which '
                    "is not loopback; set bind-address = 127.0.0.1 so only slurmdbd on this host "
                    "reaches the accounting database."]
    msgs = violations(exposure.validate_mariadb_loopback,
                      file_args("/etc/mysql/my.cnf", "[mysqld]\ninnodb_buffer_pool_size=1G\n"))
    assert "does not set bind-address" in msgs[0] and "[mysqld]" in msgs[0]
    both = "[mysqld]\nbind-address=127.0.0.1,192.0.2.10\n"
    assert "192.0.2.10" in violations(exposure.validate_mariadb_loopback, file_args(MARIADB, both))[0]
    assert violations(exposure.validate_mariadb_loopback,
                      file_args("/etc/slurm/slurm.conf", "[mysqld]\nbind-address=0.0.0.0\n")) == []


def unit(name, content=None, dropins=None, rname="slurmrestd"):
    return resource_args(SYSTEMD_UNIT, {"conn": CONN, "name": name, "content": content,
                                        "dropins": dropins or {}, "enabled": True, "active": True,
                                        "properties": {}}, rname)


PACKAGED_REST = ("[Service]\nEnvironmentFile=-/etc/default/slurmrestd\n"
                 "ExecStart=/usr/sbin/slurmrestd $SLURMRESTD_OPTIONS unix:/run/slurmrestd.socket 0.0.0.0:6820\n")


def test_slurmrestd_unix_socket_only():
    good_dropin = {"10-gpu-fleet.conf": "[Service]\nExecStart=\nExecStart=/usr/sbin/slurmrestd -a rest_auth/jwt "
                                        "-u slurmrestd unix:/run/slurmrestd/slurmrestd.socket\n"}
    v = exposure.validate_slurmrestd_unix_socket
    assert violations(v, unit("slurmrestd.service", dropins=good_dropin)) == []
    assert violations(v, unit("slurmrestd.service", PACKAGED_REST, good_dropin)) == []
    env_ok = ("[Service]\nEnvironment=LISTEN=unix:/run/r.sock\nExecStart=/usr/sbin/slurmrestd $LISTEN\n")
    assert violations(v, unit("slurmrestd.service", env_ok)) == []

    msgs = violations(v, unit("slurmrestd.service", PACKAGED_REST))
    assert msgs == ['SystemdUnit "slurmrestd" (slurmrestd.service on gpu01) makes slurmrestd listen on '
                    "$SLURMRESTD_OPTIONS, whose value the unit does not set, 0.0.0.0:6820; listen on a Unix "
                    "socket only, for example ExecStart=/usr/sbin/slurmrestd "
                    "unix:/run/slurmrestd/slurmrestd.socket."]
    msgs = violations(v, unit("slurmrestd.service", dropins={"10.conf": "[Service]\nUser=slurmrestd\n"}))
    assert "sets no ExecStart of its own" in msgs[0] and "0.0.0.0:6820" in msgs[0]
    tcp = {"10.conf": "[Service]\nExecStart=\nExecStart=/usr/sbin/slurmrestd -a rest_auth/jwt :6820\n"}
    assert "listen on :6820" in violations(v, unit("slurmrestd.service", dropins=tcp))[0]
    env_bad = "[Service]\nEnvironment=SLURMRESTD_LISTEN=0.0.0.0:6820\nExecStart=/usr/sbin/slurmrestd unix:/r.sock\n"
    assert "SLURMRESTD_LISTEN=0.0.0.0:6820" in violations(v, unit("slurmrestd.service", env_bad))[0]
    sock = "[Socket]\nListenStream=6820\n"
    assert "listens on 6820" in violations(v, unit("slurmrestd.socket", sock))[0]
    assert violations(v, unit("slurmrestd.socket", "[Socket]\nListenStream=/run/slurmrestd.sock\n")) == []
    # other units are not slurmrestd's business
    assert violations(v, unit("slurmctld.service", PACKAGED_REST)) == []


def test_slurmrestd_defaults_file():
    v = exposure.validate_slurmrestd_unix_socket
    ok = file_args("/etc/default/slurmrestd", 'SLURMRESTD_OPTIONS="-a rest_auth/jwt"\n'
                                              "SLURMRESTD_LISTEN=unix:/run/slurmrestd/slurmrestd.socket\n")
    assert violations(v, ok) == []
    bad = file_args("/etc/default/slurmrestd", 'SLURMRESTD_OPTIONS="-a rest_auth/jwt 0.0.0.0:6820"\n', "defaults")
    msgs = violations(v, bad)
    assert msgs == ['File "defaults" (/etc/default/slurmrestd on gpu01) makes slurmrestd listen on '
                    "0.0.0.0:6820; give slurmrestd Unix sockets only (unix:/run/slurmrestd/slurmrestd.socket)."]


def test_exposure_missing_and_unknown():
    v = exposure.validate_slurmrestd_unix_socket
    assert violations(v, unit("slurmrestd.service", UNKNOWN_STR)) == []
    assert violations(v, unit("slurmrestd.service", dropins={"10.conf": UNKNOWN_STR})) == []
    assert violations(v, resource_args(SYSTEMD_UNIT, {"name": UNKNOWN_STR, "dropins": UNKNOWN_OBJ})) == []
    assert violations(v, resource_args(SYSTEMD_UNIT, {})) == []
    assert violations(exposure.validate_mariadb_loopback, file_args(MARIADB, UNKNOWN_STR)) == []
    assert violations(exposure.validate_mariadb_loopback, file_args(MARIADB, None)) == []
    assert violations(v, file_args("/etc/default/slurmrestd", UNKNOWN_STR)) == []


# ---- hosts ---------------------------------------------------------------------------------

def host(name, owner, in_slurm):
    return policy_resource(HOST, {"address": "192.0.2.1", "roles": ["compute"], "owner": owner,
                                  "inSlurm": in_slurm, "gpus": 8.0, "gpuType": "v100"}, name)


K3S_IN_SLURM = ('Host "gpu05" is owned by K3s but is in a Slurm partition: the stack does not retire '
                "it (no K3s Stop acts on it), so K3s still runs it; list it in "
                "gpu-fleet:k3s_retirement.retire (layer enabled) or take it out of "
                "gpu-fleet:slurm.partitions.")


def test_hosts_membership():
    args = stack_args(host("gpu01", "slurm", True), host("gpu02", "free", False),
                      host("gpu04", "k3s", False), host("gpu15", "unreachable", False),
                      host("storage", "service", False))
    assert violations(hosts.validate_slurm_membership, args) == []
    bad = stack_args(host("gpu05", "k3s", True), host("gpu15", "unreachable", True))
    msgs = violations(hosts.validate_slurm_membership, bad)
    assert msgs == [
        K3S_IN_SLURM,
        'Host "gpu15" is unreachable but is in a Slurm partition; remove it from '
        "gpu-fleet:slurm.partitions until it is re-verified, then change its owner.",
    ]


@pytest.mark.parametrize("config", [
    {"gpu-fleet:k3s_retirement": '{"enabled": true, "retire": ["gpu05"]}', "other:key": "x"},
    {"gpu-fleet:k3s_retirement": {"enabled": False, "retire": ["gpu05"]}},
    {},
    None,  # the engine never sent the stack config
])
def test_a_k3s_retirement_section_alone_is_no_proof(config):
    """Whatever the stack config says, only the retirement's resources hand a K3s node over."""
    stackconfig.configure(config)
    assert violations(hosts.validate_slurm_membership, stack_args(host("gpu05", "k3s", True))) == [
        K3S_IN_SLURM]


RETIRED = ["gpu03", "gpu04", "gpu05", "gpu06", "gpu07"]


def retired_hosts(**kw):
    """gpu03..gpu07 in Slurm, owned by K3s, and the layer's resources retiring them."""
    res = fakes.k3s_retirement(RETIRED, "gpu03", batch_size=2, **kw)
    return res, [host(n, "k3s", True) for n in RETIRED] + list(res.values())


@pytest.mark.parametrize("config", [None, {}])
def test_a_retired_k3s_node_in_slurm_passes(config):
    """A Stop per node that waits on the Seal (the agents of later batches through the earlier
    batches too): sealed unknown in a first preview, true later."""
    stackconfig.configure(config)
    _, resources = retired_hosts()
    assert violations(hosts.validate_slurm_membership, stack_args(*resources)) == []
    _, resources = retired_hosts(sealed=True, seal_out={n: "ab" * 32 for n in RETIRED})
    assert violations(hosts.validate_slurm_membership, stack_args(*resources)) == []
    # a stop that waits on the seal only through the previous batch still waits on it
    res, resources = retired_hosts()
    res["gpu07-k3s-stop"].dependencies.remove(res["k3s-seal"])
    assert res["k3s-seal"] not in res["gpu07-k3s-stop"].dependencies
    assert violations(hosts.validate_slurm_membership, stack_args(*resources)) == []


def test_a_k3s_node_in_slurm_without_a_sealed_bundle_is_refused():
    res, resources = retired_hosts()
    res["gpu04-k3s-stop"].dependencies.remove(res["k3s-seal"])  # first batch: nothing else leads there
    assert violations(hosts.validate_slurm_membership, stack_args(*resources)) == [
        'Host "gpu04" is owned by K3s but is in a Slurm partition: its K3s Stop "gpu04-k3s-stop" does not '
        "wait on a K3s Seal of change k3s-retire-1, so K3s would be stopped without a sealed recovery "
        "bundle; make the stop depend on the seal of its bundle (the K3s retirement layer does), or take "
        "it out of gpu-fleet:slurm.partitions."]
    # no stop at all for one node
    res, resources = retired_hosts()
    resources.remove(res["gpu06-k3s-stop"])
    for r in resources:
        if res["gpu06-k3s-stop"] in r.dependencies:
            r.dependencies.remove(res["gpu06-k3s-stop"])
    assert violations(hosts.validate_slurm_membership, stack_args(*resources)) == [
        K3S_IN_SLURM.replace("gpu05", "gpu06")]


def test_a_k3s_node_whose_bundle_is_known_unsealed_is_refused():
    _, resources = retired_hosts(sealed=False)
    msgs = violations(hosts.validate_slurm_membership, stack_args(*resources))
    assert len(msgs) == len(RETIRED)
    assert msgs[0] == (
        'Host "gpu03" is owned by K3s but is in a Slurm partition: its K3s Stop "gpu03-k3s-stop" has no '
        "sealed bundle (sealed is False); seal the node's bundle (k3s:Seal) before it is stopped and "
        "handed to Slurm, or take it out of gpu-fleet:slurm.partitions.")
    # the seal ran and sealed every node but gpu05
    _, resources = retired_hosts(sealed=True, seal_out={n: "ab" * 32 for n in RETIRED if n != "gpu05"})
    assert violations(hosts.validate_slurm_membership, stack_args(*resources)) == [
        'Host "gpu05" is owned by K3s but is in a Slurm partition: the K3s Seal "k3s-seal" of change '
        "k3s-retire-1 sealed no bundle for gpu05; add the node to the seal (its preserve's items), or take "
        "it out of gpu-fleet:slurm.partitions."]


def test_a_seal_of_another_change_is_no_seal():
    res = fakes.k3s_retirement(["gpu03"], "gpu03")
    other = fakes.k3s_retirement(["gpu03"], "gpu03", change_id="k3s-retire-0")
    stop = res["gpu03-k3s-stop"]
    stop.dependencies.remove(res["k3s-seal"])
    stop.dependencies.append(other["k3s-seal"])
    msgs = violations(hosts.validate_slurm_membership,
                      stack_args(host("gpu03", "k3s", True), *res.values(), other["k3s-seal"]))
    assert len(msgs) == 1 and "does not wait on a K3s Seal of change k3s-retire-1" in msgs[0], msgs


def test_hosts_missing_and_unknown():
    stackconfig.configure({})
    args = stack_args(host("a", UNKNOWN_STR, True), host("b", "k3s", UNKNOWN_BOOL),
                      policy_resource(HOST, {}, "c"), host("d", None, True))
    assert violations(hosts.validate_slurm_membership, args) == []


# ---- relaxations ---------------------------------------------------------------------------

def test_relaxation_with_reason_is_reported_and_takes_effect():
    relax.configure({"slurm-no-root-jobs": {"enforcementLevel": "advisory", "reason": "lab jobs run as root."},
                     "packages-held": {"enforcementLevel": "mandatory"}}, declared_levels())
    assert relax.effective_level("slurm-no-root-jobs", "advisory") == "advisory"
    assert relax.effective_level("packages-held", "mandatory") == "mandatory"
    assert violations(relax.validate_reasons, stack_args()) == []
    assert violations(relax.validate_report, stack_args()) == [
        'Policy "slurm-no-root-jobs" is relaxed from mandatory to advisory for this stack by the '
        "policy pack config, for this reason: lab jobs run as root. Remove the relaxation once the "
        "reason no longer holds."]


def test_relaxation_without_reason_is_a_violation_and_has_no_effect():
    relax.configure({"slurm-no-root-jobs": {"enforcementLevel": "disabled", "reason": "  "}},
                    declared_levels())
    assert relax.effective_level("slurm-no-root-jobs", "disabled") == "mandatory"
    assert violations(relax.validate_reasons, stack_args()) == [
        'The policy pack config relaxes policy "slurm-no-root-jobs" to disabled without a reason, so '
        'it stays mandatory; add "reason": "<why this stack may break the rule>" next to its '
        "enforcementLevel, or remove the relaxation."]
    assert violations(relax.validate_report, stack_args()) == []


def test_relaxation_policies_cannot_be_relaxed():
    relax.configure({relax.REASONS_POLICY: {"enforcementLevel": "disabled", "reason": "no"},
                     relax.REPORT_POLICY: {"enforcementLevel": "disabled", "reason": "no"}},
                    declared_levels())
    assert relax.effective_level(relax.REASONS_POLICY, "disabled") == "mandatory"
    assert relax.effective_level(relax.REPORT_POLICY, "disabled") == "advisory"
    msgs = violations(relax.validate_reasons, stack_args())
    assert len(msgs) == 2 and all("cannot be relaxed" in m for m in msgs)


def test_relaxation_config_oddities():
    relax.configure({"unknown-policy": {"enforcementLevel": "advisory"},
                     "slurm-munge-auth": "advisory", "packages-held": {"enforcementLevel": 3}},
                    declared_levels())
    assert relax.relaxations() == []


# ---- messages ------------------------------------------------------------------------------

def test_every_message_is_a_sentence_naming_the_resource():
    cases = [
        (slurm.validate_no_root_jobs, file_args("/etc/slurm/slurm.conf", "DisableRootJobs=NO", "r1")),
        (slurm.validate_cgroup_confinement, file_args("/etc/slurm/cgroup.conf", "", "r1")),
        (slurm.validate_cgroup_plugins, file_args("/etc/slurm/slurm.conf", "", "r1")),
        (slurm.validate_munge_auth, file_args("/etc/slurm/slurm.conf", "", "r1")),
        (slurm.validate_typed_gres, file_args("/etc/slurm/slurm.conf", "NodeName=x Gres=gpu:2", "r1")),
        (slurm.validate_gpu_accounting, file_args(
            "/etc/slurm/slurm.conf", "AccountingStorageType=accounting_storage/slurmdbd\nNodeName=x Gres=gpu:v100:1", "r1")),
        (packages.validate_exact_versions, pkgs({"x": "*"}, name="r1")),
        (packages.validate_held, pkgs({"x": "1"}, hold=False, name="r1")),
        (secrets.validate_content_is_secret, file_args("/etc/munge/munge.key", "k", "r1")),
        (secrets.validate_private_mode, file_args("/etc/munge/munge.key", "k", "r1")),
        (exposure.validate_mariadb_loopback, file_args(MARIADB, "[mysqld]\nbind-address=0.0.0.0", "r1")),
        (exposure.validate_slurmrestd_unix_socket, unit("slurmrestd.service", rname="r1")),
        (k3s.validate_postgres_proof, resource_args(
            fakes.K3S_STOP, {"conn": CONN, "role": "agent", "audit": {"postgres": True}, "proofs": {}}, "r1")),
    ]
    for validator, args in cases:
        msgs = violations(validator, args)
        assert msgs, validator.__name__
        for m in msgs:
            assert '"r1"' in m and m.endswith(".") and m[0].isupper(), m
            assert any(w in m for w in (" set ", " add ", " remove ", "give ", "write ", " pin ", " pass ")), m


def test_a_node_copy_by_hash_is_checked_like_inline_content(tmp_path):
    """File(by_hash=True) (a node's slurm.conf, issue 16): the pack reads the bytes from the
    program's store by path and SHA-256; bytes that no longer hash to it are not taken."""
    import hashlib

    bad = CANARY_SLURM.replace("DisableRootJobs=YES", "DisableRootJobs=NO")
    src = tmp_path / "slurm.conf"
    src.write_text(bad)
    sha = hashlib.sha256(bad.encode()).hexdigest()
    args = file_args("/etc/slurm/slurm.conf", None, "slurm-conf", source=str(src), source_sha256=sha)
    assert "sets DisableRootJobs=NO" in violations(slurm.validate_no_root_jobs, args)[0]
    other = tmp_path / "other.conf"
    other.write_text(bad)
    args = file_args("/etc/slurm/slurm.conf", None, "slurm-conf", source=str(other), source_sha256="0" * 64)
    assert violations(slurm.validate_no_root_jobs, args) == []


def test_one_slurm_conf_on_every_node_is_parsed_once_and_read_alike():
    """Every node carries the same slurm.conf (its node lines grow with the fleet) and several
    policies read it on each: the parse is remembered by text, so the pack's cost grows with the
    fleet, not its square; another text is parsed on its own."""
    from gpu_fleet_policies import slurmconf

    text = "AuthType=auth/munge\n" + "".join(f"NodeName=gpu{i:04d} Gres=gpu:v100:8\n" for i in range(1250))
    copies = [("" + text + " ")[:-1] for _ in range(3)]  # equal texts, distinct objects, as per node
    assert len({id(c) for c in copies}) == 3
    slurmconf.parse.cache_clear()
    confs = [slurmconf.parse(c) for c in copies]
    assert confs[0] is confs[1] is confs[2] and slurmconf.parse.cache_info().misses == 1
    assert confs[0].get("authtype") == "auth/munge" and len(confs[0].nodes()) == 1250
    other = slurmconf.parse(text.replace("auth/munge", "auth/none"))
    assert other.get("AuthType") == "auth/none" and confs[0].get("AuthType") == "auth/munge"
