"""components.pending_hosts: which recorded resources an unreachable node keeps out of a run."""

from __future__ import annotations

import json
import sys

import pytest

from components import pending_hosts as ph


def res(urn: str, host=None, where="outputs") -> dict:
    return {"urn": urn, where: {"conn": {"name": host}} if host else {}}


def test_only_nodes_marked_unreachable_are_pending():
    cfg = {"gpu-fleet:nodes": [{"name": "n1", "owner": "slurm"}, {"name": "n2", "owner": "unreachable"},
                               {"name": "n3", "owner": "k3s"}, "junk"]}
    assert ph.unreachable(cfg) == ["n2"]
    assert ph.unreachable({}) == []


def test_excluded_takes_every_resource_recorded_for_those_hosts():
    resources = [res("a", "n1"), res("b", "n2"), res("c", "n2", where="inputs"), res("d"), res("e", "ctl")]
    assert ph.excluded(resources, ["n2"]) == {"n2": ["b", "c"]}
    assert ph.excluded(resources, ["n9"]) == {}


def test_the_pulumi_command_carries_the_excludes(tmp_path, monkeypatch, capsys):
    (tmp_path / "Pulumi.yaml").write_text("name: gpu-fleet\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.lab.yaml").write_text(
        "config:\n  gpu-fleet:nodes:\n  - {name: n2, owner: unreachable}\n")
    fake = tmp_path / "pulumi"
    fake.write_text("#!/bin/sh\ncase \"$1\" in export|stack) echo '{\"deployment\": {\"resources\": "
                    "[{\"urn\": \"urn:x$y\", \"outputs\": {\"conn\": {\"name\": \"n2\"}}}]}}' ;; esac\n")
    fake.chmod(0o755)
    seen = {}

    def execvp(_file, argv):
        seen["argv"] = argv
        raise SystemExit(0)

    monkeypatch.setattr(ph.os, "execvp", execvp)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):  # a preview without refresh contacts no host: the CLI as it is
        ph.main(["preview", "lab", "--cwd", str(tmp_path), "--pulumi", str(fake), "--", "--diff"])
    assert seen["argv"] == [str(fake), "preview", "--stack", "lab", "--exclude", "urn:x$y", "--diff"]
    assert "node n2 is marked unreachable: its 1 recorded resources are left as they are" in capsys.readouterr().err


# ---- a host the stack no longer declares, unreachable: the error names `make forget` ----------

def diag(message: str, severity: str = "error") -> str:
    return json.dumps({"sequence": 7, "diagnosticEvent": {
        "urn": "urn:pulumi:full::gpu-fleet::pulumi-python:dynamic/host:File::gpu07-conf",
        "prefix": f"{severity}: ", "message": message, "severity": severity}})


UNREACHABLE = ("Exception: host gpu07: `test -f /etc/slurm/slurm.conf` failed with exit code 255: cannot reach "
               "192.0.2.27:22 over SSH\n")
REMEMBERED = ("Exception: host gpu07: cannot reach 192.0.2.27:22 over SSH (remembered from the first try at "
              "16:03:12; not tried again this run)\n")
#: a probe that is a script (providers/kept.py wraps each create's probe in one): lines in the backquotes
SCRIPTED = ("Exception: host gpu08: `sh -c 'f=$1\nshift\n\"$@\"\n' sh /var/lib/gpu-fleet/kept/File/ab.json test -f x` "
            "failed with exit code 255: cannot reach 192.0.2.28:22 over SSH\n")
NESTED = "Exception: storage clients: not every node could be probed over SSH:\nhost gpu09: cannot reach 192.0.2.29:22 over SSH\n"


def test_the_hosts_an_event_log_says_could_not_be_reached():
    events = [json.dumps({"sequence": 1, "resourcePreEvent": {"metadata": {"op": "delete"}}}), "not json over SSH",
              diag(UNREACHABLE), diag(REMEMBERED), diag(SCRIPTED), diag(NESTED),
              diag("host gpu11: cannot reach 192.0.2.31:22 over SSH\n", severity="warning"),
              diag("host gpu12: `x` failed with exit code 1\n")]
    assert ph.unreachable_hosts(events) == ["gpu07", "gpu08", "gpu09"]


def test_forget_is_named_only_for_a_host_the_stack_no_longer_declares():
    cfg = {"gpu-fleet:hosts": {"controller": {"name": "storage", "address": "192.0.2.10"}},
           "gpu-fleet:nodes": [{"name": "gpu01", "owner": "slurm"}, {"name": "gpu15", "owner": "unreachable"}]}
    hints = ph.forget_hints("full", cfg, ["gpu07", "gpu01", "storage", "gpu15"])
    assert [h.rsplit("\n", 1)[1] for h in hints] == ["  make forget STACK=full NODE=gpu07",
                                                      "  make forget STACK=full NODE=gpu15"]
    assert hints[0].startswith("pending_hosts: gpu07 cannot be reached over SSH and stack full no longer uses it")
    assert ph.forget_hints("full", None, ["gpu07"]) == []  # a node list that cannot be read: no guess


def test_a_node_list_in_a_nodes_file_still_declares_its_nodes(tmp_path):
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "nodes.big.yaml").write_text("nodes:\n- {name: gpu07, owner: slurm}\n")
    cfg = ph.with_nodes_file({"gpu-fleet:nodes_file": "stacks/nodes.big.yaml"}, tmp_path)
    assert ph.forget_hints("big", cfg, ["gpu07", "gpu08"]) == [ph.forget_hints("big", {}, ["gpu08"])[0]]
    assert ph.with_nodes_file({"gpu-fleet:nodes_file": "stacks/missing.yaml"}, tmp_path) is None


FAKE_PULUMI = """\
import json, sys
args = sys.argv[1:]
if args[:2] == ["stack", "export"]:
    print(json.dumps({"deployment": {"resources": []}}))
    sys.exit(0)
log = args[args.index("--event-log") + 1]
with open(log, "w") as f:
    f.write(json.dumps({"diagnosticEvent": {"severity": "error", "message": %r}}) + "\\n")
print("pulumi " + " ".join(args[:3]))
sys.exit(255)
"""


def test_a_failed_up_names_make_forget_with_the_real_stack_and_node(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # main() changes into the project, as `make` runs it there
    (tmp_path / "Pulumi.yaml").write_text("name: gpu-fleet\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.full.yaml").write_text(
        "config:\n  gpu-fleet:nodes:\n  - {name: gpu01, owner: slurm}\n")
    fake = tmp_path / "pulumi"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_PULUMI % UNREACHABLE)
    fake.chmod(0o755)
    for op, args in (("up", ["--yes", "--refresh"]), ("refresh", ["--yes"]), ("preview", ["--refresh"])):
        rc = ph.main([op, "full", "--cwd", str(tmp_path), "--pulumi", str(fake), "--", *args])
        out, err = capfd.readouterr()
        assert rc == 255 and out == f"pulumi {op} --stack full\n"
        assert err.endswith("\n  make forget STACK=full NODE=gpu07\n"), err
    # the node back in the stack: forget would refuse it, so it is not suggested
    (tmp_path / "stacks" / "Pulumi.full.yaml").write_text(
        "config:\n  gpu-fleet:nodes:\n  - {name: gpu07, owner: slurm}\n")
    assert ph.main(["up", "full", "--cwd", str(tmp_path), "--pulumi", str(fake)]) == 255
    assert "make forget" not in capfd.readouterr().err
