"""The stack's own configuration (`gpu-fleet:*` keys), as the engine sent it to the pack.

Filled by engine.install()'s ConfigureStack hook; None until the engine has sent it (a
policy that needs it must then fail closed). Tests set it with `configure`.
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


def retiring_nodes(config: Optional[dict[str, Any]]) -> Optional[set[str]]:
    """Names listed in an enabled `gpu-fleet:k3s_retirement`; None if the config is unknown."""
    if config is None:
        return None
    k3s = config.get("k3s_retirement")
    if not isinstance(k3s, dict) or not k3s.get("enabled"):
        return set()
    retire = k3s.get("retire")
    return {n for n in retire if isinstance(n, str)} if isinstance(retire, list) else set()
