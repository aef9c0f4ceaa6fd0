"""File: content, mode and ownership of one file, written atomically.

The content goes over stdin into a 0600 temp file in the target directory,
gets its owner and mode, is optionally validated (`validate` argv, `{}` is the
temp path), and is renamed into place: readers never see a partial or
world-readable secret. A file that existed before is backed up on first
create and restored by delete, so destroy leaves the host as it was.
Outputs carry the content's SHA-256, never the content.

`by_hash=True` (non-secret text only) keeps the content out of the stack altogether: the text
goes to the local content-addressed store (`stored.py`) and the inputs hold its path and
SHA-256 (`source`, `source_sha256`), as a `Payload`'s do, so a file rendered for the whole
fleet and written to every node costs each node's state a few hundred bytes, not its size.
The type, the diff (desired SHA-256 against the recorded one) and the probe are the same, so
a state recorded with inline content takes the switch as no change.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Optional, Sequence

import pulumi
from pulumi.dynamic import Resource

from ..scripts import script
from ..kit import sh
from .base import HostPrimitive
from .parts import Observed, PlanRefused, Props, Step
from .stored import store_text

BACKUP_DIR = "/var/lib/gpu-fleet/backup"

_PROBE = script(__file__, "file_probe.sh")
_WRITE = script(__file__, "file_write.sh")


def backup_path(path: str) -> str:
    return f"{BACKUP_DIR}/{path.strip('/').replace('/', '%')}"


def sha256_text(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def read_source(props: Props) -> bytes:
    """The bytes of a by-hash File or a Payload, refused unless they hash to the declared SHA-256."""
    from pathlib import Path

    src = Path(props["source"])
    try:
        data = src.read_bytes()
    except OSError as e:
        raise PlanRefused(f"{props['path']}: cannot read its local artifact {src}: {e.strerror}") from None
    got = hashlib.sha256(data).hexdigest()
    if got != props["source_sha256"]:
        raise PlanRefused(f"{props['path']}: its local artifact {src} changed since the program read it "
                          f"(SHA-256 {got}, declared {props['source_sha256']}); run the command again")
    return data


def stored_source(content: pulumi.Input[str]) -> dict:
    """A by-hash file's inputs for `content`: the local store's path of its text and the text's
    SHA-256 (stored now for a str, once computed for an Output)."""
    if isinstance(content, str):
        source, sha = store_text(content)
        return {"source": source, "source_sha256": sha}
    # pulumi's from_input overloads match no part of the narrowed Awaitable[str] | Output[str]
    stored = pulumi.Output.from_input(content).apply(store_text)  # type: ignore[arg-type]
    return {"source": stored[0], "source_sha256": stored[1]}


def sha256sum_line(text: str) -> tuple[str, str]:
    """(digest, path) of one line of `sha256sum`'s output ("<hex>  <path>"; for a name with a
    backslash or newline, "\\<hex>  <path>" with those escaped); ("", "") for an empty one."""
    digest, _, path = text.partition("  ")
    if digest.startswith("\\"):  # one pass: "\\n" is a backslash and an n, not a newline
        digest, path = digest[1:], re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], path)
    return digest.strip(), path


def norm_mode(mode: str) -> str:
    """'0644' and '644' are the same mode; `stat %a` prints the short form."""
    return format(int(str(mode), 8), "o")


def write_step(path: str, content: str | bytes, owner: str, group: str, mode: str,
               validate: Optional[Sequence[str]] = None, secret: bool = False,
               why: str = "write") -> Step:
    return Step(sh(_WRITE, path, owner, group, norm_mode(mode), *(validate or [])),
                f"{why} {path}", stdin=content if isinstance(content, bytes) else content.encode(),
                stdin_secret=secret)


def parse_file_probe(stdout: str) -> Observed:
    obs: Observed = {"kind": "absent", "backup": False, "parent": True}
    for line in stdout.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "kind":
            obs["kind"] = rest
        elif tag == "meta":
            obs["mode"], obs["owner"], obs["group"] = rest.split()
        elif tag == "sha256":  # sha256sum's own line
            obs["sha256"] = sha256sum_line(rest)[0]
        elif tag == "backup":
            obs["backup"] = rest == "yes"
        elif tag == "parent":
            obs["parent"] = rest == "yes"
        elif tag == "bytecode":
            obs.setdefault("bytecode", []).append(rest)
        elif line == "python3 absent":
            obs["python3"] = False
    return obs


class FileProvider(HostPrimitive):
    replace_on = ("path",)
    record_keys = ("original", "made_parent", "original_sha256")

    def key(self, props: Props) -> str:
        return props["path"]

    def probe_argv(self, props: Props) -> list[str]:
        return sh(_PROBE, props["path"], backup_path(props["path"]))

    def parse(self, props: Props, stdout: str) -> Observed:
        return parse_file_probe(stdout)

    def digest(self, props: Props) -> str:
        """The SHA-256 the host's file must have."""
        if props.get("source_sha256") is not None:  # by hash
            return props["source_sha256"]
        return sha256_text(props["content"])

    def content(self, props: Props) -> str | bytes:
        if props.get("source") is not None:  # by hash
            return read_source(props)
        return props["content"]

    def desired(self, props: Props) -> dict[str, Any]:
        return {"present": True, "sha256": self.digest(props),
                "mode": norm_mode(props.get("mode", "0644")),
                "owner": props.get("owner", "root"), "group": props.get("group", "root")}

    def state(self, props: Props, obs: Observed) -> dict[str, Any]:
        present = obs["kind"] == "file"
        return {"present": present, "sha256": obs.get("sha256"), "mode": obs.get("mode"),
                "owner": obs.get("owner"), "group": obs.get("group")}

    def remember(self, props: Props, before: Observed) -> Props:
        return {"original": "backup" if before["kind"] == "file" else "absent",
                "made_parent": not before.get("parent", True),
                "original_sha256": before.get("sha256") if before["kind"] == "file" else None}

    def needs_write(self, props: Props, obs: Observed) -> bool:
        """Whether the host's file must be (re)written: absent, or other bytes."""
        return obs["kind"] == "absent" or obs.get("sha256") != self.digest(props)

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        path = props["path"]
        if obs["kind"] not in ("file", "absent"):
            raise PlanRefused(f"{path} is a {obs['kind']}, not a regular file; refusing to replace it")
        want = self.desired(props)
        steps: list[Step] = []
        # keep the original only while the file there is it (or is not ours): a file this
        # primitive wrote after its backup was lost (a re-imaged host) is never the original
        ours = obs.get("sha256") == want["sha256"] != record.get("original_sha256")
        if record.get("original") == "backup" and obs["kind"] == "file" and not obs["backup"] and not ours:
            steps.append(Step(sh('mkdir -p -- "$(dirname -- "$2")" && cp -p -- "$1" "$2"',
                                 path, backup_path(path)), f"keep the original {path}"))
        if self.needs_write(props, obs):
            steps.append(write_step(path, self.content(props), want["owner"], want["group"],
                                    want["mode"], props.get("validate"),
                                    bool(props.get("secret")), "write"))
            return steps
        if (obs["owner"], obs["group"]) != (want["owner"], want["group"]):
            steps.append(Step(["chown", "--", f"{want['owner']}:{want['group']}", path],
                              f"owner of {path}"))
        if obs["mode"] != want["mode"]:
            steps.append(Step(["chmod", "--", want["mode"], path], f"mode of {path}"))
        return steps

    def plan_delete(self, props: Props, obs: Observed) -> list[Step]:
        path = props["path"]
        if props.get("original") == "backup" and obs["backup"]:
            return [Step(["mv", "-f", "--", backup_path(path), path], f"restore the original {path}")]
        steps = []
        # the host's own original back in place (a re-imaged host) is not this primitive's to remove
        if obs["kind"] == "file" and not (props.get("original") == "backup"
                                          and obs.get("sha256") == props.get("original_sha256")):
            steps.append(Step(["rm", "-f", "--", path], f"remove {path}"))
        if props.get("made_parent"):
            steps.append(Step(sh('rmdir -- "$(dirname -- "$1")" 2>/dev/null || true', path),
                              f"remove the directory created for {path}"))
        return steps

    def public_inputs(self, props: Props) -> Props:
        return {k: v for k, v in props.items() if k != "content"}


class File(Resource, module="host", name="File"):
    """A file on one host, with exact content, mode and owner."""

    sha256: pulumi.Output[str]
    present: pulumi.Output[bool]

    def __init__(self, name: str, *, conn: dict, path: str, content: pulumi.Input[str],
                 mode: str = "0644", owner: str = "root", group: str = "root",
                 validate: Optional[list[str]] = None, secret: bool = False, by_hash: bool = False,
                 opts: Optional[pulumi.ResourceOptions] = None):
        if by_hash:
            if secret:
                raise ValueError(f"File {name}: a secret's content stays inline (encrypted by the engine), "
                                 "never in the local store")
            body = stored_source(content)
        else:
            body = {"content": content}
        super().__init__(
            FileProvider(), name,
            {"conn": conn, "path": path, **body, "mode": mode, "owner": owner,
             "group": group, "validate": validate, "secret": secret,
             "sha256": None, "present": None},
            opts,
        )
