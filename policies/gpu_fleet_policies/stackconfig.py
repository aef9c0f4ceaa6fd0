"""The stack's own configuration (`gpu-fleet:*` keys), as the engine sent it to the pack.

Filled by engine.install()'s ConfigureStack hook; None until the engine has sent it (a
policy that needs it must then fail closed). Tests set it with `configure`.

No policy takes a layer's section here as proof of what that layer did: `hosts-slurm-membership`
admits a K3s-owned node in Slurm only on the retirement's own resources (a K3s Stop after a K3s
Seal), whatever `gpu-fleet:k3s_retirement` says. `k3s-batches-server-last` reads its
`batch_size` (a setting, not a proof).
"""

from __future__ import annotations

import json
from typing import Any, Optional

PROJECT = "gpu-fleet"
_config: Optional[dict[str, Any]] = None


def configure(raw: Optional[dict[str, Any]]) -> None:
    """Keep the stack config: keys with or without the `gpu-fleet:` prefix; JSON text decoded."""
    global _config
    if raw is None:
        _config = None
        return
    out: dict[str, Any] = {}
    for key, value in raw.items():
        ns, sep, name = str(key).partition(":")
        if sep and ns != PROJECT:
            continue
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        out[name if sep else key] = value
    _config = out


def get() -> Optional[dict[str, Any]]:
    """The stack's `gpu-fleet` config by key (without the prefix), or None if not known."""
    return _config

