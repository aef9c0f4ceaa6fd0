"""The web layer: Slurm-web's agent and gateway as hardened podman containers on the controller."""
