"""The shell scripts gpu-fleet runs on hosts, kept as `.sh` files beside the code that sends them.

Each layer package (and `providers`) holds its scripts in a `scripts/` folder, and a
module loads one by name, once, at import:

    _PROBE = script(__file__, "file_probe.sh")

The files are read by this program, never copied to a host: the text travels as the
script of `sh -c <text> sh <args...>` (`bash -c` where a script says `#!/bin/bash`).
`sh` is dash on Debian hosts, so a `#!/bin/sh` script must be POSIX sh; shellcheck
checks every one (tests/unit/test_shell_scripts.py).

A file opens with its header: the `#!` line and the comment lines right after it,
saying what the script does and what its positional arguments are. The header is for
readers and shellcheck and is not sent: what runs is the text from the first line
that is not a comment (a blank line ends the header). So a header edit changes
nothing a host runs, nor a command a stack records (a `CommandWithVerify` re-runs
its `create` when that text changes).
"""

from __future__ import annotations

import functools
from pathlib import Path


def _body(text: str) -> str:
    """The text after the header (the leading `#!` and comment lines)."""
    lines = text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    return "".join(lines[n:])


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> str:
    try:
        return _body(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"shell script {path} is missing (a module in "
                                f"{path.parent.parent} loads it by name)") from None


def script_path(module_file: str, name: str) -> Path:
    """`<directory of module_file>/scripts/<name>`."""
    return Path(module_file).resolve().parent / "scripts" / name


def script_text(path: Path) -> str:
    """The runnable text of a script kept elsewhere than `scripts/` (a layer's on-node steps)."""
    return _load(path)


def script(module_file: str, name: str) -> str:
    """The runnable text of `scripts/<name>` beside `module_file` (pass `__file__`), read once."""
    return _load(script_path(module_file, name))


def installed(module_file: str, name: str) -> str:
    """The whole text of `scripts/<name>`, its header and `#!` line included: for a script a host
    keeps and runs by its `#!` (a unit's ExecStart), not for a command's text."""
    return script_path(module_file, name).read_text(encoding="utf-8")


def sections(stdout: str) -> dict[str, str]:
    """A probe's output split at its `== <name>` lines: name -> the text under it."""
    out: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("== "):
            current = line[3:].strip()
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}
