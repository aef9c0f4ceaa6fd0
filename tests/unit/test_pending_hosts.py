"""components.pending_hosts: which recorded resources an unreachable node keeps out of a run."""

from __future__ import annotations

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
    monkeypatch.setattr(ph.os, "execvp", lambda f, argv: seen.setdefault("argv", argv))
    monkeypatch.chdir(tmp_path)
    ph.main(["up", "lab", "--cwd", str(tmp_path), "--pulumi", str(fake), "--", "--yes"])
    assert seen["argv"] == [str(fake), "up", "--stack", "lab", "--exclude", "urn:x$y", "--yes"]
    assert "node n2 is marked unreachable: its 1 recorded resources are left as they are" in capsys.readouterr().err
