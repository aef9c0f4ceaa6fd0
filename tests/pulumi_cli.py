"""Drive the real Pulumi CLI against a throwaway copy of the project.

Each test gets its own project directory, file backend, PULUMI_HOME and
passphrase, so it never touches the developer's state or the committed stack
files (stack init writes an encryption salt into them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: (test id, pulumi command, seconds) of every CLI run in this session: the suite's summary
#: prints where the lab time goes (tests/conftest.py)
CLI_SECONDS: list[tuple[str, str, float]] = []
PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "components", "stacks")


def pinned_versions() -> dict[str, str]:
    out = {}
    for line in (ROOT / "scripts" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


@dataclass
class PulumiProject:
    dir: Path
    env: dict[str, str] = field(default_factory=dict)
    #: the transport's command log (GPU_FLEET_COMMAND_LOG) when a test keeps one
    log: Optional[Path] = None

    @classmethod
    def copy_of_repo(cls, tmp: Path) -> "PulumiProject":
        proj = cls.copy_of(tmp, [ROOT / n for n in PROJECT_FILES])
        # The lab stack names its key and known_hosts relative to the project root.
        (proj.dir / ".state").mkdir()
        (proj.dir / ".state" / "lab").symlink_to(ROOT / ".state" / "lab")
        # what `make setup` built for the hosts (the model downloader's wheels)
        (proj.dir / ".tools").symlink_to(ROOT / ".tools")
        return proj

    def ensure_secrets(self, stack: str) -> None:
        """What `make stack` does after init: generate the stack's secrets (MUNGE key)."""
        import sys
        subprocess.run([sys.executable, "-m", "components.stack_secrets", "ensure", stack,
                        "--cwd", str(self.dir)], env=self.env, cwd=ROOT, check=True,
                       capture_output=True, text=True, timeout=120)

    @classmethod
    def copy_of(cls, tmp: Path, sources: list[Path]) -> "PulumiProject":
        """A project dir made of copies of `sources` (files and whole directories)."""
        proj = tmp / "project"
        proj.mkdir()
        for src in sources:
            dest = proj / src.name
            if src.is_dir():
                # bytecode too (tests/conftest.py writes it): copy2 keeps the sources' times,
                # so it stays valid in the copy
                shutil.copytree(src, dest)
            else:
                shutil.copy2(src, dest)
        (proj / "stacks").mkdir(exist_ok=True)
        # A fresh stack: drop the salt and secrets a developer's own `make stack` wrote into
        # the copy (they are encrypted for another passphrase).
        for f in (proj / "stacks").glob("Pulumi.*.yaml"):
            text = f.read_text()
            data = yaml.safe_load(text) or {}
            cfg = data.get("config") or {}
            secure = [k for k, v in cfg.items() if isinstance(v, dict) and "secure" in v]
            if "encryptionsalt" in data or secure:
                for k in secure:
                    del cfg[k]
                data.pop("encryptionsalt", None)
                f.write_text(yaml.safe_dump(data, sort_keys=False))
        (proj / ".venv").symlink_to(ROOT / ".venv")
        (tmp / "backend").mkdir()
        env = dict(os.environ)
        env.update(
            PATH=f"{ROOT / '.tools' / 'bin'}:{env.get('PATH', '')}",
            PULUMI_HOME=str(tmp / "pulumi-home"),
            PULUMI_BACKEND_URL=f"file://{tmp / 'backend'}",
            PULUMI_CONFIG_PASSPHRASE="gpu-fleet-test-passphrase",
            PULUMI_RUNTIME_VIRTUALENV=str(ROOT / ".venv"),
            PULUMI_SKIP_UPDATE_CHECK="true",
            PULUMI_DIY_BACKEND_NO_LEGACY_WARNING="true",
        )
        env.pop("PULUMI_CONFIG_PASSPHRASE_FILE", None)
        return cls(proj, env)

    @property
    def backend(self) -> Path:
        """The file backend's directory (its stacks' state)."""
        return Path(self.env["PULUMI_BACKEND_URL"].removeprefix("file://"))

    def run(self, *args: str, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
        start = time.monotonic()
        try:
            p = subprocess.run(
                ["pulumi", *args, "--non-interactive"], cwd=self.dir, env=self.env,
                capture_output=True, text=True, timeout=timeout,
            )
        finally:
            test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
            CLI_SECONDS.append((test, " ".join(a for a in args[:2] if not a.startswith("-")),
                                time.monotonic() - start))
        if check and p.returncode != 0:
            raise AssertionError(
                f"pulumi {' '.join(args)} exited {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
            )
        return p

    def up(self, *extra: str, stack: str = "lab", check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
        """`pulumi up` that sets a test's scene: without its preview, which would run the program
        and every probe once more. A test of what the user's `up` shows or refuses runs `up` itself."""
        return self.run("up", "--yes", "--skip-preview", "--stack", stack, *extra, check=check, timeout=timeout)

    def refresh(self, *extra: str, stack: str = "lab", check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
        """`pulumi refresh` without its preview, as `up` above."""
        return self.run("refresh", "--yes", "--skip-preview", "--stack", stack, *extra, check=check, timeout=timeout)

    def outputs(self, stack: str = "lab") -> dict:
        """The stack's outputs (secrets as the CLI shows them: `[secret]`)."""
        return json.loads(self.run("stack", "output", "--json", "--stack", stack).stdout)

    def init_stack(self, stack: str, secrets: bool = True) -> None:
        self.run("stack", "init", stack, "--secrets-provider", "passphrase")
        if secrets and (self.dir / "components" / "stack_secrets.py").exists():
            self.ensure_secrets(stack)

    def preview_json(self, stack: str) -> dict:
        return json.loads(self.run("preview", "--stack", stack, "--json").stdout)

    def write_stack(self, stack: str, text: str) -> None:
        (self.dir / "stacks" / f"Pulumi.{stack}.yaml").write_text(text)
