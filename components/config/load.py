"""Read a stack's config and validate it into a `FleetConfig`, before any host is touched.

A stack file (`stacks/Pulumi.<stack>.yaml`) holds one structured key per concern under the
project namespace (`gpu-fleet:hosts`, `gpu-fleet:nodes`, `gpu-fleet:slurm`, ...).
`parse_fleet_config` turns those raw values into a `FleetConfig` or raises one `ConfigError`
that lists every problem with the stack file and the field path
(`gpu-fleet:nodes[3] (gpu04).gpus.count`), so a user fixes them all in one pass. Pydantic checks
shapes and types; the rules that need the whole fleet run after (`fleet.cross_check`).
Nothing silent: a section for a layer not built yet (`NOT_BUILT`) is an error, never a no-op.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Optional

from pydantic import TypeAdapter, ValidationError

from ..errors import ConfigError
from .fleet import NOT_BUILT, FleetConfig, cross_check
from .project import PROJECT, SECRET_KEYS, stack_file
from .types import LocalPath, shown


def _plain(word: Any) -> str:
    """A key or name as a field path shows it: as is when it is a plain word, else quoted, so a
    newline in a refused value never breaks the one-line-per-problem report."""
    word = str(word)
    return word if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", word) else shown(word)


def _format_loc(loc: tuple[Any, ...], raw: dict[str, Any]) -> str:
    """('nodes', 3, 'gpus', 'count') -> 'gpu-fleet:nodes[3] (gpu04).gpus.count'."""
    out = ""
    node: Any = raw
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
            try:
                node = node[part]
                if isinstance(node, dict) and isinstance(node.get("name"), str):
                    out += f" ({_plain(node['name'])})"
            except (KeyError, IndexError, TypeError):
                node = None
        else:
            out += f"{PROJECT}:{_plain(part)}" if i == 0 else f".{_plain(part)}"
            node = node.get(part) if isinstance(node, dict) else None
    return out or PROJECT


def _decode(value: Any) -> Any:
    """Pulumi hands structured config values to the program as JSON text."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


#: The language host hands the program the whole stack config as one environment string
#: (PULUMI_CONFIG), which Linux caps at 128 KiB (MAX_ARG_STRLEN): about 660 nodes inline. A large
#: fleet's node list goes in a file the stack names, `gpu-fleet:nodes_file: stacks/nodes.big.yaml`
#: (a mapping with one key, `nodes`, the same list), validated by the same model.
NODES_FILE = "nodes_file"


def _read_nodes_file(value: Any, root: Path) -> tuple[Optional[list], Optional[str], Optional[str]]:
    """(nodes, SHA-256 of the file, None) or (None, None, what is wrong)."""
    import yaml

    try:
        rel = TypeAdapter(LocalPath).validate_python(value)
    except ValidationError as e:
        return None, None, e.errors()[0]["msg"].removeprefix("Value error, ")
    path = Path(rel).expanduser()
    path = path if path.is_absolute() else root / path
    try:
        blob = path.read_bytes()
    except OSError as e:
        return None, None, f"cannot read {rel}: {e.strerror}"
    try:
        doc = yaml.safe_load(blob)
    except yaml.YAMLError as e:
        return None, None, f"{rel} is not YAML: {str(e).splitlines()[0]}"
    if not isinstance(doc, dict) or set(doc) != {"nodes"} or not isinstance(doc["nodes"], list):
        return None, None, f"{rel} must hold one key, `nodes`, with the list of nodes"
    return doc["nodes"], hashlib.sha256(blob).hexdigest(), None


def parse_fleet_config(raw: dict[str, Any], source: str, root: Optional[Path] = None) -> FleetConfig:
    """Validate raw `gpu-fleet:*` config values; raise ConfigError listing every problem.

    `raw` maps keys with or without the `gpu-fleet:` prefix to values (decoded
    or JSON text); keys of other namespaces are ignored. `source` names the
    stack file in messages. A section for a layer in NOT_BUILT is one more
    problem, listed with the others. A `nodes_file` is read relative to `root`
    (the project root: the program's working directory), and a problem in one
    of its entries names the file, the entry and the field.
    """
    data: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        ns, sep, name = key.partition(":")
        if sep and ns != PROJECT:
            continue
        name = name if sep else key
        if name in SECRET_KEYS:
            continue  # secrets are read (and checked to be secret) by the layer that uses them
        if name in NOT_BUILT:
            problems.append(f"{PROJECT}:{name}: {NOT_BUILT[name]} is not built yet; remove this "
                            "section (it would do nothing)")
            continue
        data[name] = _decode(value)
    from_file: Optional[tuple[str, str]] = None
    if NODES_FILE in data:
        rel = data.pop(NODES_FILE)
        if "nodes" in data:
            problems.append(f"{PROJECT}:{NODES_FILE}: set together with {PROJECT}:nodes; keep the node list "
                            "in one place")
        else:
            nodes, sha, why = _read_nodes_file(rel, root or Path.cwd())
            if why or sha is None:
                problems.append(f"{PROJECT}:{NODES_FILE}: {why}")
            else:
                data["nodes"], from_file = nodes, (str(rel), sha)

    def located(ps: list[str]) -> list[str]:
        """A node's problem, when the list came from a file, names that file."""
        if not from_file:
            return ps
        inline = f"{PROJECT}:nodes"
        return [f"{PROJECT}:{NODES_FILE} {from_file[0]}: nodes{p[len(inline):]}"
                if p.startswith((inline + "[", inline + ":")) else p for p in ps]

    try:
        cfg = FleetConfig.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            if err["type"] == "missing" and tuple(err["loc"]) == ("nodes",) and any(
                    p.startswith(f"{PROJECT}:{NODES_FILE}:") for p in problems):
                continue  # the nodes file's own problem says why
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
            elif err["type"] == "missing":
                msg = "required field is missing"
            problems.append(f"{_format_loc(tuple(err['loc']), data)}: {msg}")
        raise ConfigError(source, located(problems)) from None
    cfg._nodes_file = from_file
    problems += cross_check(cfg)
    if problems:
        raise ConfigError(source, located(problems))
    return cfg


def load_stack_config(stack: str) -> FleetConfig:
    """Read the running program's config from the engine and validate it."""
    from pulumi.runtime.config import get_config_env

    return parse_fleet_config(dict(get_config_env()), stack_file(stack))
