"""python -m lab up [--nodes N] | down | status | reboot HOST | reimage HOST | checkpoint save|restore|drop NAME
| k3s install|remove|status | web-images
(as root, with the project's .venv python)."""

from __future__ import annotations

import argparse
import re
import sys

from .common import LabError
from .hosts import DEFAULT_NODES, MAX_NODES


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m lab",
        description="Local test hosts: systemd-nspawn containers (Debian bookworm, systemd, sshd) "
                    "on the bridge gflab0 (10.213.57.0/24).",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    pu = sub.add_parser("up", help="boot the lab (idempotent); write stacks/Pulumi.lab.yaml")
    pu.add_argument("--nodes", type=int, default=DEFAULT_NODES,
                    help=f"compute nodes node1..nodeN (default {DEFAULT_NODES}, at most {MAX_NODES})")
    pu.add_argument("--timeout", type=float, default=120.0,
                    help="seconds to wait for every host's sshd (default 120)")
    pu.add_argument("--rootfs", choices=["auto", "overlay", "copy"], default=None,
                    help="per-host root filesystem: overlay on the cached image, or a full copy "
                         "(default auto: overlay, else copy; env GPU_FLEET_LAB_ROOTFS)")
    sub.add_parser("prepare", help="build (or find in the machine-wide cache) the image and the package "
                                   "repository `up` boots from, booting nothing (needs the Debian mirror "
                                   "the first time on a machine)")
    pd = sub.add_parser("down", help="stop every lab host and remove its state (keeps the cache)")
    pd.add_argument("--keep-checkpoints", action="store_true",
                    help="keep the lab's checkpoints (python -m lab checkpoint) for the next `up`")
    sub.add_parser("status", help="one line per host: process alive, ssh reachable")
    pr = sub.add_parser("reboot", help="restart one host of the running lab (a clean poweroff, "
                                       "then a boot of the same root filesystem)")
    pr.add_argument("host", help="storage, ctl, node1, ...")
    pr.add_argument("--timeout", type=float, default=120.0,
                    help="seconds to wait for its sshd (default 120)")
    pi = sub.add_parser("reimage", help="re-image one host in place: a fresh root filesystem from the "
                                         "base image and a new host key, same name and address")
    pi.add_argument("host", help="storage, ctl, node1, ...")
    pi.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for its sshd (default 120)")
    pc = sub.add_parser("checkpoint", help="keep every host's disk (a clean poweroff, then a boot) or put it "
                                           "back (every host stopped and booted from it): lab/checkpoint.py")
    pc.add_argument("action", choices=["save", "restore", "drop"])
    pc.add_argument("name", help="the checkpoint's name (letters, digits, - and _)")
    pc.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each sshd (default 120)")
    pk = sub.add_parser("k3s", help="the lab's K3s on nodes of the running lab (kine + kube-apiserver, "
                                     "k3s.service / k3s-agent.service; lab/k3s.py)")
    ksub = pk.add_subparsers(dest="k3s_cmd", required=True)
    ki = ksub.add_parser("install", help="install K3s as its installer leaves it: one server, agents")
    ki.add_argument("--server", required=True, help="the server node (runs k3s.service and PostgreSQL)")
    ki.add_argument("--agents", default="", help="agent nodes, comma-separated (k3s-agent.service)")
    kr = ksub.add_parser("remove", help="take K3s off nodes completely (idempotent)")
    kr.add_argument("--nodes", required=True, help="nodes, comma-separated")
    ks = ksub.add_parser("status", help="JSON per node: units, Node Ready + heartbeat age, shims, mounts")
    ks.add_argument("--nodes", default="", help="nodes, comma-separated (default: every node)")
    pw = sub.add_parser("web-images", help="the Slurm-web 6.0.0 images (built from the vendored source, "
                                           "cached) in the lab registry storage:5000; writes "
                                           ".state/lab/web-images.json (idempotent; lab/web_images)")
    pw.add_argument("--json", action="store_true", help="print the record as JSON")
    args = p.parse_args(argv)

    from . import core

    try:
        if args.cmd == "up":
            if not 1 <= args.nodes <= MAX_NODES:
                p.error(f"--nodes must be between 1 and {MAX_NODES}")
            core.up(args.nodes, args.timeout, args.rootfs)
            return 0
        if args.cmd == "prepare":
            core.prepare()
            return 0
        if args.cmd == "down":
            core.down(args.keep_checkpoints)
            return 0
        if args.cmd == "reboot":
            core.reboot(args.host, args.timeout)
            return 0
        if args.cmd == "checkpoint":
            from . import checkpoint

            if not re.fullmatch(r"[A-Za-z0-9_-]+", args.name):
                p.error(f"checkpoint name {args.name!r}: letters, digits, - and _ only")
            if args.action == "drop":
                checkpoint.drop(args.name)
            else:
                (checkpoint.save if args.action == "save" else checkpoint.restore)(args.name, args.timeout)
            return 0
        if args.cmd == "k3s":
            from . import k3s

            return k3s.main(args)
        if args.cmd == "web-images":
            from . import web_images

            return web_images.main(args)
        if args.cmd == "reimage":
            core.reimage(args.host, args.timeout)
            return 0
        return core.status()
    except LabError as e:
        print(f"lab: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lab: interrupted (run `python -m lab down` to clean up)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
