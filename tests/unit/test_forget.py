"""components.forget's pure parts: which resources are a host's, what blocks, in which order."""

from __future__ import annotations

from components.forget import blockers, declared, delete_order, host_of, targets


def res(name: str, host: str | None = None, *, where: str = "outputs", **state) -> dict:
    r = {"urn": f"urn:pulumi:s::gpu-fleet::t::{name}", **state}
    if host:
        r[where] = {"conn": {"name": host, "address": "10.0.0.1"}}
    return r


def u(name: str) -> str:
    return f"urn:pulumi:s::gpu-fleet::t::{name}"


def test_a_hosts_resources_are_found_by_their_recorded_conn_outputs_or_inputs():
    rs = [res("a", "node2"), res("b", "node2", where="inputs"), res("c", "node1"), res("fleet"),
          {"urn": u("odd"), "outputs": {"conn": "node2"}}]
    assert host_of(rs[1]) == "node2" and host_of(rs[3]) is None
    assert targets(rs, "node2") == [u("a"), u("b")]


def test_dependents_parents_and_deleted_with_of_other_hosts_block():
    rs = [res("n2-a", "node2"), res("n2-b", "node2", dependencies=[u("n2-a")]),
          res("ctl", "ctl", propertyDependencies={"x": [u("n2-b")]}),
          res("fleet", None, dependencies=[u("n2-a")]),
          res("child", None, parent=u("n2-a")), res("gone-with", "node1", deletedWith=u("n2-b")),
          res("free", "node1", dependencies=[u("ctl")])]
    got = {(b.dependent.rsplit("::", 1)[1], b.dependent_host, b.target.rsplit("::", 1)[1])
           for b in blockers(rs, targets(rs, "node2"))}
    assert got == {("ctl", "ctl", "n2-b"), ("fleet", None, "n2-a"), ("child", None, "n2-a"),
                   ("gone-with", "node1", "n2-b")}
    assert "of the whole fleet (no single host)" in str(blockers(rs[:4], [u("n2-a"), u("n2-b")])[-1])


def test_dependents_and_children_are_forgotten_before_what_they_point_at():
    rs = [res("comp", "node2"), res("a", "node2", parent=u("comp")), res("b", "node2", dependencies=[u("a")]),
          res("c", "node2", propertyDependencies={"p": [u("b")]}, parent=u("comp")), res("d", "node2")]
    order = delete_order(rs, targets(rs, "node2"))
    assert sorted(order) == sorted(targets(rs, "node2"))
    for r in rs:
        for ref in [*r.get("dependencies", []), *(r.get("propertyDependencies") or {}).get("p", []),
                    *([r["parent"]] if r.get("parent") else [])]:
            assert order.index(r["urn"]) < order.index(ref), (r["urn"], ref)


def test_only_an_unreachable_or_undeclared_node_may_be_forgotten():
    cfg = {"gpu-fleet:hosts": {"storage": {"name": "st"}, "controller": {"name": "ctl"}},
           "gpu-fleet:nodes": [{"name": "gpu01", "owner": "slurm"}, {"name": "gpu15", "owner": "unreachable"},
                               {"name": "gpu03", "owner": "k3s"}]}
    assert declared(cfg, "gpu15") is None and declared(cfg, "gpu99") is None and declared({}, "x") is None
    assert declared(cfg, "gpu01") == "gpu-fleet:nodes[0] declares it with owner 'slurm'"
    assert declared(cfg, "gpu03") == "gpu-fleet:nodes[2] declares it with owner 'k3s'"
    assert declared(cfg, "ctl") == "it is the stack's controller host (gpu-fleet:hosts.controller)"
