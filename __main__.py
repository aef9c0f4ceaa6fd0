"""Pulumi program: validate the stack's config, build the Fleet, export what it promises."""

import pulumi

from components.config import load_stack_config
from components.errors import FleetError
from components.fleet import Fleet

try:
    cfg = load_stack_config(pulumi.get_stack())
except FleetError as e:
    # RunError ends the program with the message alone, before any resource exists.
    raise pulumi.RunError(str(e)) from None

fleet = Fleet(pulumi.get_stack(), cfg)
pulumi.export("summary", fleet.summary)
