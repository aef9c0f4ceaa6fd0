"""One of each host primitive on each given lab host; config `variant` changes their inputs.

Driven by tests/lab/test_primitives.py and bench/noop_refresh.py.
"""

import json

import pulumi

from components.providers import Account, CommandWithVerify, File, PackageSet, SystemdUnit

cfg = pulumi.Config()
conns = json.loads(cfg.require("conns"))
variant = cfg.get_int("variant") or 1
packages = json.loads(cfg.require("packages"))
secret = cfg.require_secret("secret")

for conn in conns:
    h = conn["name"]
    acc = Account(f"{h}-account", conn=conn, user="gftest", uid=64101, gid=64101)
    after_acc = pulumi.ResourceOptions(depends_on=[acc])
    File(f"{h}-file", conn=conn, path="/etc/gpu-fleet-test/demo.conf",
         content=f"# managed by gpu-fleet\nvariant={variant}\n", mode="0640", owner="root",
         group="gftest", opts=after_acc)
    File(f"{h}-secret", conn=conn, path="/etc/gpu-fleet-test/secret.key", content=secret,
         mode="0400", owner="gftest", group="gftest", secret=True, opts=after_acc)
    SystemdUnit(f"{h}-unit", conn=conn, unit="gf-demo.service",
                content=f"[Unit]\nDescription=gpu-fleet test unit {variant}\n\n[Service]\n"
                        "ExecStart=/bin/sleep infinity\n\n[Install]\nWantedBy=multi-user.target\n",
                dropins={"10-delegate.conf": "[Service]\nDelegate=yes\n"},
                properties={"Delegate": "yes"})
    PackageSet(f"{h}-packages", conn=conn, packages=packages, hold=True)
    CommandWithVerify(f"{h}-command", conn=conn,
                      create=["sh", "-c", "mkdir -p /var/tmp/gf && echo made > /var/tmp/gf/marker"],
                      verify=["test", "-s", "/var/tmp/gf/marker"],
                      delete=["rm", "-rf", "/var/tmp/gf"], triggers={"variant": variant})
