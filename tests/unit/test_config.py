"""Stack config validation: the committed stacks parse; each bad case names file and field."""

from __future__ import annotations

import json
import re
import typing

import pytest
from pydantic import BaseModel

from components.config.fleet import FleetConfig, NOT_BUILT
from components.config.load import parse_fleet_config
from components.errors import ConfigError, FleetError
from components.inventory import fleet_summary, host_records
from components.stack_secrets import STACK_SECRETS, check_secret, db_password_problem, required_secret

SRC = "stacks/Pulumi.test.yaml"


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(raw, SRC)
    assert isinstance(exc.value, FleetError)
    assert all(f"  {SRC}: " in line for line in str(exc.value).splitlines()[1:])
    return exc.value.problems


K3S_SENTENCE = ("K3s still runs it: only the K3s retirement layer hands a node over to Slurm (audit, "
                "preserve with proof, stop, restore on rollback); list it in k3s_retirement.retire "
                "(layer enabled) or take it out of the partition")


def test_full_stack_retires_its_k3s_nodes(full_config):
    """The committed full stack is the seed's target: 12 of its 14 partition nodes run K3s and
    the K3s retirement layer retires them (server gpu03, agents 4 at a time)."""
    owners = [n["owner"] for n in full_config["gpu-fleet:nodes"]]
    assert owners.count("k3s") == 12 and len(full_config["gpu-fleet:slurm"]["partitions"][0]["nodes"]) == 14
    k = parse_fleet_config(full_config, "stacks/Pulumi.full.yaml").k3s_retirement
    assert (k.enabled, k.server, k.batch_size, len(k.retire)) == (True, "gpu03", 4, 12)


def test_full_stack_without_its_retirement_is_refused_naming_every_k3s_node(full_config):
    del full_config["gpu-fleet:k3s_retirement"]
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(full_config, "stacks/Pulumi.full.yaml")
    assert exc.value.problems == [
        f"gpu-fleet:slurm.partitions[0] (v100).nodes[{i - 1}]: node 'gpu{i:02d}' is owned by k3s: "
        + K3S_SENTENCE for i in range(3, 15)
    ]
    lines = str(exc.value).splitlines()
    assert lines[0] == "invalid stack configuration in stacks/Pulumi.full.yaml:"
    assert len(lines) == 13


def test_fleet14_is_the_seed_fleet(fleet14_config):
    cfg = parse_fleet_config(fleet14_config, "stacks/Pulumi.full.yaml")
    s = fleet_summary(cfg)
    assert s["nodes_by_owner"] == {"slurm": 13, "free": 1, "unreachable": 1}
    # The seed's production partition: 14 nodes, 1120 CPUs, 2,576,000 MiB, 112 V100.
    assert (s["slurm_nodes"], s["slurm_cpus"], s["slurm_memory_mib"], s["slurm_gpus"]) == (
        14, 1120, 2_576_000, 112,
    )
    assert s["pending_nodes"] == ["gpu15"] and s["canary_nodes"] == ["gpu01"]
    assert {n.gpus.model for n in cfg.nodes} == {"Tesla V100-SXM2-16GB"}
    assert all(n.address.startswith("192.0.2.") for n in cfg.nodes)


def test_canary_stack_has_one_canary_node(canary_config):
    cfg = parse_fleet_config(canary_config, "stacks/Pulumi.canary.yaml")
    assert [n.name for n in cfg.slurm_nodes()] == ["gpu01"] == [n.name for n in cfg.canary_nodes()]
    # storage and controller are one host in the seed: it appears once, with both roles.
    recs = {r.name: r for r in host_records(cfg)}
    assert recs["storage"].roles == ("storage", "controller")
    assert set(recs) == {"storage", "gpu01"}


def test_values_as_engine_json_text(fleet14_config):
    """The engine hands structured values to the program as JSON strings."""
    raw = {k: json.dumps(v) for k, v in fleet14_config.items()}
    assert parse_fleet_config(raw, SRC).slurm.partitions[0].name == "v100"


def test_other_namespaces_are_ignored(fleet14_config):
    fleet14_config["aws:region"] = "us-east-1"
    parse_fleet_config(fleet14_config, SRC)


def test_unknown_top_level_key(fleet14_config):
    fleet14_config["gpu-fleet:storge"] = {"pool": "ai"}
    assert problems_of(fleet14_config) == ["gpu-fleet:storge: unknown field"]


def test_unknown_nested_field_names_node(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][3]["gpu"] = 8
    assert problems_of(fleet14_config) == ["gpu-fleet:nodes[3] (gpu04).gpu: unknown field"]


def test_wrong_type(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][0]["cpus"] = "eighty"
    [p] = problems_of(fleet14_config)
    assert p.startswith("gpu-fleet:nodes[0] (gpu01).cpus: ") and "integer" in p


def test_missing_required_field(fleet14_config):
    del fleet14_config["gpu-fleet:nodes"][1]["owner"]
    assert problems_of(fleet14_config) == ["gpu-fleet:nodes[1] (gpu02).owner: required field is missing"]


def test_bad_owner(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][1]["owner"] = "kubernetes"
    [p] = problems_of(fleet14_config)
    assert p.startswith("gpu-fleet:nodes[1] (gpu02).owner: ") and "'k3s'" in p


def test_duplicate_node_name(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][4]["name"] = "gpu04"
    ps = problems_of(fleet14_config)
    assert any(
        p.startswith("gpu-fleet:nodes[4] (gpu04).name: duplicate host name 'gpu04'")
        and "gpu-fleet:nodes[3] (gpu04)" in p for p in ps
    ), ps


def test_duplicate_address(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][5]["address"] = "192.0.2.21"
    assert problems_of(fleet14_config) == [
        "gpu-fleet:nodes[5] (gpu06).address: duplicate address '192.0.2.21' "
        "(also gpu-fleet:nodes[0] (gpu01))"
    ]


def test_node_address_may_not_reuse_storage(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][0]["address"] = "192.0.2.10"
    [p] = problems_of(fleet14_config)
    assert p.startswith("gpu-fleet:nodes[0] (gpu01).address: duplicate address")


def test_bad_address(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][0]["address"] = "192.0.2.300_x"
    [p] = problems_of(fleet14_config)
    assert p.startswith("gpu-fleet:nodes[0] (gpu01).address: ")


def test_gpu_count_zero_on_gpu_node(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][2]["gpus"]["count"] = 0
    assert problems_of(fleet14_config) == [
        "gpu-fleet:nodes[2] (gpu03).gpus.count: a GPU node needs at least 1 GPU (got 0); "
        "omit `gpus` for a CPU-only node"
    ]


def test_unreachable_node_in_partition(fleet14_config):
    fleet14_config["gpu-fleet:slurm"]["partitions"][0]["nodes"].append("gpu15")
    [p] = problems_of(fleet14_config)
    assert p.startswith("gpu-fleet:slurm.partitions[0] (v100).nodes[14]: node 'gpu15' is unreachable")


def test_k3s_node_in_partition_is_refused_and_says_why(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][6]["owner"] = "k3s"
    assert problems_of(fleet14_config) == [
        "gpu-fleet:slurm.partitions[0] (v100).nodes[6]: node 'gpu07' is owned by k3s: " + K3S_SENTENCE]


def test_unknown_node_in_partition(fleet14_config):
    fleet14_config["gpu-fleet:slurm"]["partitions"][0]["nodes"][1] = "gpu99"
    assert "gpu-fleet:slurm.partitions[0] (v100).nodes[1]: unknown node 'gpu99'" in problems_of(
        fleet14_config
    )


def test_same_uid_for_slurm_and_munge(fleet14_config):
    fleet14_config["gpu-fleet:slurm"]["slurm_uid"] = 440
    assert problems_of(fleet14_config) == [
        "gpu-fleet:slurm.munge_uid: must differ from slurm_uid (440)"
    ]


def test_munge_ids_must_be_system_ids(fleet14_config):
    fleet14_config["gpu-fleet:slurm"]["munge_uid"] = 64031
    [p] = problems_of(fleet14_config)
    assert p.startswith("gpu-fleet:slurm.munge_uid: 64031 is not a system id (100-999)")


def test_controller_half_matching_storage(fleet14_config):
    fleet14_config["gpu-fleet:hosts"]["controller"] = {"name": "storage", "address": "192.0.2.11"}
    [p] = problems_of(fleet14_config)
    assert p.startswith("gpu-fleet:hosts.controller: shares a name or address")


def test_every_problem_reported_at_once(fleet14_config):
    fleet14_config["gpu-fleet:nodes"][2]["gpus"]["count"] = 0
    fleet14_config["gpu-fleet:nodes"][3]["cpus"] = -1
    fleet14_config["gpu-fleet:bogus"] = 1
    ps = problems_of(fleet14_config)
    assert len(ps) == 3
    assert {p.split(":")[1].split(".")[0] for p in ps} == {"nodes[2] (gpu03)", "nodes[3] (gpu04)", "bogus"}


def test_cross_checks_all_reported(fleet14_config):
    fleet14_config["gpu-fleet:slurm"]["partitions"][0]["nodes"] += ["gpu15", "gpu99"]
    fleet14_config["gpu-fleet:nodes"][5]["address"] = "192.0.2.21"
    assert len(problems_of(fleet14_config)) == 3


def test_accounting_backups_must_live_outside_the_datadir(fleet14_config):
    """Rollback removes the datadir after its dump is proven: a dump inside it would go too."""
    fleet14_config["gpu-fleet:accounting"] = {"datadir": "/srv/db", "backup_dir": "/srv/db/backups"}
    [p] = problems_of(fleet14_config)
    assert p.startswith("gpu-fleet:accounting.backup_dir: /srv/db/backups is inside accounting.datadir"), p
    fleet14_config["gpu-fleet:accounting"] = {"datadir": "/srv/db", "backup_dir": "/srv/db-backups"}
    assert parse_fleet_config(fleet14_config, SRC).accounting.backup_dir == "/srv/db-backups"


# ---- layers not built: a section is an error, never a no-op -----------------------------------
# Every layer the seed describes is built; the rule stays for the next one (a layer named here
# before its code lands). The tests name an imaginary layer.

@pytest.fixture
def unbuilt(monkeypatch):
    monkeypatch.setitem(NOT_BUILT, "quantum", "the quantum layer (a test's imaginary layer)")
    return "quantum"


def test_no_layer_not_built_has_a_model():
    assert not set(NOT_BUILT) & set(FleetConfig.model_fields)


def test_a_section_for_a_layer_not_built_is_refused(canary_config, unbuilt):
    canary_config[f"gpu-fleet:{unbuilt}"] = {"enabled": False}
    assert problems_of(canary_config) == [
        f"gpu-fleet:{unbuilt}: {NOT_BUILT[unbuilt]} is not built yet; remove this section (it would do nothing)"]


def test_layer_not_built_is_listed_with_every_other_problem(canary_config, unbuilt):
    canary_config[f"gpu-fleet:{unbuilt}"] = json.dumps({"enabled": False})  # as the engine sends it
    canary_config["gpu-fleet:nodes"][0]["cpus"] = 0
    with pytest.raises(ConfigError) as exc:
        parse_fleet_config(canary_config, "stacks/Pulumi.canary.yaml")
    assert [p.split(":")[1] for p in exc.value.problems] == [unbuilt, "nodes[0] (gpu01).cpus"]
    assert (f"  stacks/Pulumi.canary.yaml: gpu-fleet:{unbuilt}: {NOT_BUILT[unbuilt]} is not built yet; "
            "remove this section (it would do nothing)") in str(exc.value).splitlines()


# ---- every config string is checked ------------------------------------------------------------

def _str_fields(model: type[BaseModel], prefix: tuple) -> typing.Iterator[tuple[tuple, bool]]:
    """(path, is a list of strings) of every str field reachable from `model`."""
    for name, field in model.model_fields.items():
        ann, is_list = field.annotation, False
        while True:
            origin, args = typing.get_origin(ann), typing.get_args(ann)
            if origin is typing.Union:
                ann = next(a for a in args if a is not type(None))
            elif origin is list:
                ann, is_list = args[0], True
            elif origin is typing.Annotated:
                ann = args[0]
            else:
                break
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _str_fields(ann, prefix + ((name, 0) if is_list else (name,)))
        elif ann is str:
            yield prefix + (name,), is_list


STR_FIELDS = sorted(_str_fields(FleetConfig, ()), key=str)


def put(raw: dict, path: tuple, value) -> None:
    """Set the field at `path`, making the sections and a first list item the stack lacks."""
    node = raw.setdefault(f"gpu-fleet:{path[0]}", {})
    for part, after in zip(path[1:-1], path[2:]):
        if isinstance(part, int):
            node = node[part]
        else:
            node = node.setdefault(part, [{}] if isinstance(after, int) else {})
    node[path[-1]] = value


def test_the_walk_finds_the_strings():
    paths = {".".join(map(str, p)) for p, _ in STR_FIELDS}
    assert {"ssh.user", "ssh.proxy_jump", "nodes.0.address", "nodes.0.gpus.model",
            "slurm.partitions.0.max_time", "slurm.release.debian_version",
            "gpu_runtime.probe_paths.proc_modules", "gpu_runtime.required_cgroup_controllers",
            "accounting.db_user"} <= paths
    assert len(paths) >= 35


@pytest.mark.parametrize("bad", ["ok\n", "a\x1b[31m", "a\x00b"])
@pytest.mark.parametrize("path,is_list", STR_FIELDS, ids=[".".join(map(str, p)) for p, _ in STR_FIELDS])
def test_no_config_string_takes_a_newline_or_control_character(canary_config, path, is_list, bad):
    put(canary_config, path, [bad] if is_list else bad)
    ps = problems_of(canary_config)
    assert all("\n" not in p and "\x1b" not in p and "\x00" not in p for p in ps), ps
    field = path[-1] + ("[0]" if is_list else "")
    assert any(f".{field}: " in p or f":{field}: " in p for p in ps), ps
    assert any("contains a newline or another control character; expected " in p for p in ps), ps


#: (field path, bad value, what the message says is allowed)
REFUSED = [
    ("ssh.user", "root; id", "a POSIX user name"),
    ("ssh.user", "$(id)", "a POSIX user name"),
    ("ssh.user", "ad min", "a POSIX user name"),
    ("ssh.identity_file", "keys/id rsa", "a path on this machine"),
    ("ssh.identity_file", "../keys/id", "no '..'"),
    ("ssh.identity_file", "~/.ssh/id_%h", "a path on this machine"),
    ("ssh.known_hosts_file", "/tmp/kh;rm", "a path on this machine"),
    ("ssh.proxy_jump", "bastion;id", "ssh jump hosts"),
    ("ssh.proxy_jump", "jump host", "ssh jump hosts"),
    ("ssh.proxy_jump", "admin@bastion:99999", "ssh jump hosts"),
    ("ssh.proxy_jump", "-oProxyCommand=sh", "ssh jump hosts"),
    ("hosts.storage.address", "192.0.2.10; id", "an IP address"),
    ("hosts.storage.address", "fe80::1%eth0", "without an IPv6 zone"),
    ("hosts.controller.name", "$(id)", "a name: a lowercase letter"),
    ("nodes[0].gpus.type", "v100;", "a GRES type"),
    ("nodes[0].address", "gpu 01", "an IP address"),
    ("slurm.cluster_name", "v100 x", "a name: a lowercase letter"),
    ("slurm.canary_user", "fleet canary", "a POSIX user name"),
    ("slurm.partitions[0].max_time", "1 day", "a Slurm time limit"),
    ("slurm.partitions[0].max_time", "10;", "a Slurm time limit"),
    ("slurm.partitions[0].nodes[0]", "gpu01;id", "a name: a lowercase letter"),
    ("slurm.release.version", "26.05.4;id", "a version of digits and dots"),
    ("slurm.release.debian_version", "$(id)", "a Debian package version"),
    ("slurm.release.debian_version", "26.05.4-1 +v1", "a Debian package version"),
    ("slurm.release.munge_version", "latest", "a Debian package version"),
    ("slurm.release.pmix_version", "4.2.2;id", "a Debian package version"),
    ("slurm.release.source_sha256", "ABC", "a SHA-256 digest"),
    ("slurm.release.source_dir", "srv/build", "an absolute path"),
    ("slurm.release.source_dir", "/srv/../etc", "no '..'"),
    ("slurm.release.source_dir", "/srv/my build", "no spaces"),
    ("slurm.release.source_dir", "/srv/$(id)", "an absolute path"),
    ("slurm.gpu_device_prefix", "/dev/nvidia;rm", "a device path prefix under /dev/"),
    ("gpu_runtime.driver_version", "580;id", "a version of digits and dots"),
    ("gpu_runtime.cuda_runtime", "12.9.1 ", "a version of digits and dots"),
    ("gpu_runtime.pynvml_dir", "opt/lib", "an absolute path"),
    ("gpu_runtime.probe_paths.proc_modules", "proc/modules", "an absolute path"),
    ("gpu_runtime.probe_paths.sys_module_dir", "/sys/module /etc", "an absolute path"),
    ("gpu_runtime.required_cgroup_controllers[0]", "memory;id", "a cgroup controller name"),
    ("accounting.database", "acct`db", "a database identifier"),
    ("accounting.db_user", "slurm'--", "a database identifier"),
    ("accounting.mariadb_version", "10.11 ; id", "a Debian package version"),
    ("accounting.nftables_version", "$(id)", "a Debian package version"),
    ("accounting.datadir", "relative/db", "an absolute path"),
    ("accounting.backup_dir", "/srv/backup/../..", "no '..'"),
    ("accounting.restd_user", "rest user", "a POSIX user name"),
]


def _path(field: str) -> tuple:
    return tuple(int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", field))


def _shown_path(field: str) -> str:
    """The field path as messages name it: a list item with a name shows it."""
    field = re.sub(r"^nodes\[0\]", "nodes[0] (gpu01)", field)
    return "gpu-fleet:" + field.replace("partitions[0]", "partitions[0] (canary)")


@pytest.mark.parametrize("field,bad,allowed", REFUSED, ids=[f"{f}={b!r}" for f, b, _ in REFUSED])
def test_bad_string_is_refused_naming_the_field_and_what_is_allowed(canary_config, field, bad, allowed):
    path = _path(field)
    if path[-1] == 0:  # a list item
        put(canary_config, path[:-1], [bad])
    else:
        put(canary_config, path, bad)
    [p] = problems_of(canary_config)
    assert p.startswith(f"{_shown_path(field)}: {bad!r} is not "), p
    assert allowed in p, p


@pytest.mark.parametrize("field,good", [
    ("ssh.user", "gpu_admin"), ("ssh.user", "_svc-1"),
    ("ssh.identity_file", "~/.ssh/id_ed25519"), ("ssh.identity_file", "/root/.ssh/id_rsa"),
    ("ssh.identity_file", ".state/lab/id_ed25519"), ("ssh.known_hosts_file", "keys/known_hosts"),
    ("ssh.proxy_jump", "bastion"), ("ssh.proxy_jump", "admin@bastion.example.org:2222,10.0.0.1"),
    ("ssh.proxy_jump", "ops@[2001:db8::1]:22"),
    ("nodes[0].address", "2001:db8::21"), ("nodes[0].address", "gpu01.example.org"),
    ("slurm.partitions[0].max_time", "UNLIMITED"), ("slurm.partitions[0].max_time", "90"),
    ("slurm.partitions[0].max_time", "30:00"), ("slurm.partitions[0].max_time", "1-12:00:00"),
    ("slurm.partitions[0].max_time", "2-12"),
    ("slurm.release.debian_version", "1:24.11.5-4+deb13u1~bookworm1"),
    ("slurm.release.version", "24.11"), ("slurm.release.source_sha256", "0" * 64),
    ("slurm.release.source_dir", "/srv/lab-repo"), ("slurm.gpu_device_prefix", "/dev/fakegpu"),
    ("slurm.constrain_swap_reason", "the lab kernel has no swap accounting; see #42 ($HOME is fine)"),
    ("nodes[0].gpus.model", "NVIDIA A100-SXM4-80GB"),
    ("gpu_runtime.required_cgroup_controllers[0]", "hugetlb"),
    ("accounting.mariadb_version", "1:10.11.6-0+deb12u1"),
])
def test_good_strings_pass(canary_config, field, good):
    path = _path(field)
    if path[-1] == 0:
        put(canary_config, path[:-1], [good])
    else:
        put(canary_config, path, good)
    parse_fleet_config(canary_config, SRC)


def test_a_refused_name_keeps_the_report_one_line_per_problem(canary_config):
    canary_config["gpu-fleet:nodes"][0]["name"] = "gpu01\nrm -rf /"
    canary_config["gpu-fleet:bad\nkey"] = 1
    ps = problems_of(canary_config)
    assert all("\n" not in p for p in ps), ps
    assert ps[0].startswith("gpu-fleet:nodes[0] ('gpu01\\nrm -rf /').name: 'gpu01\\nrm -rf /' contains a "
                            "newline or another control character"), ps
    assert "gpu-fleet:'bad\\nkey': unknown field" in ps


# ---- secrets: refused without ever being shown --------------------------------------------------

@pytest.mark.parametrize("password,why", [
    ("Xq7zv9\nStorageUser=root", "a newline or another control character"),
    ("Xq7zv9\x07Kw2", "a newline or another control character"),
    ("Xq7zv9#Kw2", "'#' (slurmdbd.conf reads the rest of the line as a comment)"),
    ("Xq7zv9 Kw2", "white space"),
    ('Xq7zv9"Kw2', "quoting"),
    ("Xq7zv9\\Kw2", "escape"),
    ("", "is empty"),
])
def test_db_password_slurmdbd_conf_cannot_carry_is_refused_never_shown(password, why):
    with pytest.raises(ConfigError) as exc:
        check_secret("db_password", password, "stacks/Pulumi.canary.yaml")
    text = str(exc.value)
    assert text.startswith("invalid stack configuration in stacks/Pulumi.canary.yaml:\n"
                           "  stacks/Pulumi.canary.yaml: gpu-fleet:db_password: the value "), text
    assert why in text
    for piece in (password, repr(password)[1:-1], password[:6], password[7:]):
        assert not piece or piece not in text


def test_generated_secrets_always_pass():
    gen = STACK_SECRETS["db_password"][0]
    for _ in range(2000):
        value = gen()
        assert db_password_problem(value) is None
        check_secret("db_password", value, SRC)
    assert db_password_problem("Aa0-_" * 8) is None


@pytest.fixture
def engine_config():
    from pulumi.runtime.config import set_all_config

    yield set_all_config
    set_all_config({}, [])


def test_required_secret_checks_the_value_before_any_resource(engine_config):
    bad = "s3cr3t#tail"
    engine_config({"gpu-fleet:db_password": bad}, ["gpu-fleet:db_password"])
    with pytest.raises(ConfigError) as exc:
        required_secret("db_password", "stacks/Pulumi.lab.yaml")
    assert exc.value.problems[0].startswith("gpu-fleet:db_password: the value contains '#'")
    assert "stacks/Pulumi.lab.yaml" in str(exc.value) and "s3cr3t" not in str(exc.value)
    engine_config({"gpu-fleet:db_password": bad}, [])  # plain text: refused for that, first
    with pytest.raises(ConfigError, match="stored in plain text"):
        required_secret("db_password", "stacks/Pulumi.lab.yaml")
    engine_config({"gpu-fleet:db_password": "fine-Password_1"}, ["gpu-fleet:db_password"])
    assert required_secret("db_password", "stacks/Pulumi.lab.yaml") is not None
