"""gpu-fleet: Pulumi components that bring an on-prem GPU fleet up as a verified Slurm cluster."""
