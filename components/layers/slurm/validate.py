"""Validate a new slurm.conf in isolation before any live daemon reads it.

Slurm 22.05 has no configuration test mode, so the controller's copy is proven
the way the seed did it: a throw-away `slurmctld -D` started on the candidate
file, with its own port, state, pid and log under a private temp directory.
The file passes once that daemon says "Running as primary controller"; it fails
if the daemon exits first (a bad plugin, an unknown key, a malformed node line)
and its own log is the error. The accounting lines (storage, gathering, the JWT
AuthAlt) are dropped from the copy: the test daemon must never register with
slurmdbd, and the JWT key may not exist yet when the config is first written
(the accounting layer installs it); the rest of the file is what is validated.
The live slurmctld, its state and its port are never touched.

Used as the `validate` hook of the controller's slurm.conf File: the candidate
is validated in the temp file the File wrote, before it is renamed into place,
and node copies are written only after the controller's copy validated.
"""

from __future__ import annotations

from ...scripts import script

VALIDATE_PORT = 16817  # the live controller keeps 6817
VALIDATE_TIMEOUT_S = 60

_VALIDATE = script(__file__, "validate.sh")


def validate_argv(live_path: str, port: int = VALIDATE_PORT,
                  timeout_s: int = VALIDATE_TIMEOUT_S) -> list[str]:
    """The File `validate` argv for the controller's slurm.conf (`{}` is the candidate)."""
    return ["sh", "-c", _VALIDATE, "sh", "{}", str(port), str(timeout_s), live_path]
