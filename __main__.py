"""Pulumi program: validate the stack's config, build the Fleet, export each layer's outputs."""

from pathlib import Path

import pulumi

from components import sdk
from components.config.load import load_stack_config
from components.config.project import stack_file
from components.errors import FleetError
from components.fleet import Fleet, FleetSecrets
from components.stack_secrets import optional_secret, required_secret

sdk.tune()  # issue 16: no per-resource stack traces, a linear end-of-program drain

stack = pulumi.get_stack()
try:
    cfg = load_stack_config(stack)
    acct = cfg.slurm.enabled and cfg.accounting.enabled
    secrets = FleetSecrets(
        munge_key=required_secret("munge_key", stack_file(stack)) if cfg.slurm.enabled else None,
        db_password=required_secret("db_password", stack_file(stack)) if acct else None,
        jwt_key=required_secret("jwt_key", stack_file(stack)) if acct else None,
        hf_token=optional_secret("hf_token", stack_file(stack)) if cfg.model_snapshot.enabled else None)
except FleetError as e:
    # RunError ends the program with the message alone, before any resource exists.
    raise pulumi.RunError(str(e)) from None

fleet = Fleet(stack, cfg, Path(__file__).resolve().parent, secrets)
pulumi.export("summary", fleet.summary)
for built in fleet.built():
    for key, value in built.exports().items():
        pulumi.export(key, value)
