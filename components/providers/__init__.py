"""Host primitives as Python dynamic providers: each probes, plans, then applies.

Each primitive has its own type token (`pulumi-python:dynamic/host:<Name>`) so
policies can match it.
"""

from .account import Account
from .bundle import Accounts, Files
from .command import CommandWithVerify
from .file import File
from .packages import PackageSet
from .payload import Payload
from .systemd import SystemdUnit

__all__ = ["Account", "Accounts", "CommandWithVerify", "File", "Files", "PackageSet", "Payload", "SystemdUnit"]
