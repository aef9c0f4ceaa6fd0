"""The lab: real local hosts for the project's integration tests and demo.

`python -m lab up|down|status` (as root) boots systemd-nspawn containers from a
debootstrapped Debian bookworm image: systemd as PID 1, sshd, python3, each with
its own hostname and address on a private bridge (`gflab0`, 10.213.57.0/24),
a local apt repository bound read-only at /srv/lab-repo and, on the nodes, the
lab's K3s parts at /srv/lab-k3s. `up` writes the
`lab` stack file (`stacks/Pulumi.lab.yaml`) and `.state/lab/inventory.json`.

Modules: `common` (paths, logging, commands, locks), `hosts` (names and
addresses), `image` (the cached base image), `repo` (the hosts' apt
repository), `rootfs` (per-host root filesystems), `nspawn` (cgroups, boot,
stop), `net` (the bridge), `stackfile` (stack file and inventory), `fake_nvml`
(the GPU test double on the nodes), `storage` (the storage host's pool as an admin
leaves it, the NFS client test double on the nodes), `core` (up/down/status/reboot),
`k3s` (`python -m lab k3s install|remove|status`: K3s on nodes, as its installer leaves it),
`web_images` (`python -m lab web-images`: the Slurm-web 6.0.0 images, built from the vendored
source, in the lab registry on the storage host).
"""
