"""Every shell script of the repository is shellcheck-clean, and the scripts sent to hosts
live in `scripts/*.sh` files beside their layer (components/scripts.py), not in Python strings."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from components.scripts import script

ROOT = Path(__file__).resolve().parents[2]

SHELL_CONSTANT = re.compile(r'^_[A-Z_]+ = r?"""', re.M)
SHEBANGS = ("#!/bin/sh", "#!/bin/bash")
#: a module that sends a bash script: the argv itself, or components/kit.py's bash()
BASH_ARGV = re.compile(r'\["bash", "-c"|\bbash\(|import [^\n]*\bbash\b')



def repo_sh_files() -> list[str]:
    """Every *.sh that git tracks, and the new ones it does not ignore, relative to ROOT."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.sh"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, f"git ls-files failed: {out.stderr}"
    return sorted({p for p in out.stdout.splitlines() if (ROOT / p).is_file()})


def host_scripts() -> list[Path]:
    return sorted((ROOT / "components").rglob("scripts/*.sh"))


def test_every_shell_script_is_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed: run `make setup` (as root it installs "
                    "shellcheck; otherwise it says how to)")
    files = repo_sh_files()
    assert "scripts/setup.sh" in files and "lab/build-slurm.sh" in files
    assert {str(p.relative_to(ROOT)) for p in host_scripts()} <= set(files)
    # -x: follow `. file` where a `# shellcheck source=` directive names it (paths from ROOT)
    res = subprocess.run(["shellcheck", "-x", "--color=never", *files], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0 and not res.stdout.strip(), \
        f"shellcheck findings (fix them, or disable one with a comment saying why):\n{res.stdout}{res.stderr}"


def test_host_scripts_say_what_they_do_and_are_posix_unless_run_by_bash():
    assert host_scripts(), "no components/**/scripts/*.sh found"
    for path in host_scripts():
        lines = path.read_text().splitlines()
        rel = path.relative_to(ROOT)
        assert lines[0] in SHEBANGS, f"{rel}: first line must be one of {SHEBANGS}"
        assert len(lines) > 1 and lines[1].startswith("# ") and len(lines[1]) > 12, \
            f"{rel}: second line must be a comment saying what it does and its positional args"
        assert script(str(path.parent.parent / "x.py"), path.name).strip(), f"{rel}: nothing to run"
        if lines[0] == "#!/bin/bash":
            # `sh -c` is dash on Debian hosts: a bash script must be sent with `bash -c`
            users = [py for py in path.parent.parent.glob("*.py") if f'"{path.name}"' in py.read_text()]
            assert users and all(BASH_ARGV.search(py.read_text()) for py in users), \
                f"{rel} says #!/bin/bash but a module loading it does not run it with bash -c"


def test_no_module_holds_a_shell_script():
    held = {}
    for py in sorted((ROOT / "components").rglob("*.py")):
        rel = str(py.relative_to(ROOT))
        found = SHELL_CONSTANT.findall(py.read_text())
        if found:
            held[rel] = found
    assert held == {}, \
        f"module-level shell scripts (move each to scripts/<name>.sh and load it with " \
        f"components.scripts.script): {held}"


def test_the_loader_sends_the_text_after_the_header_and_reads_once(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "x.sh").write_text(
        "#!/bin/sh\n# Says hi. $1 a name.\n# shellcheck disable=SC2016\n\n# kept: a comment in the body\necho \"hi $1\"\n")
    module = str(tmp_path / "mod.py")
    text = script(module, "x.sh")
    assert text == "\n# kept: a comment in the body\necho \"hi $1\"\n"
    assert script(module, "x.sh") is text
    assert subprocess.run(["sh", "-c", text, "sh", "you"], capture_output=True, text=True).stdout == "hi you\n"


def test_a_missing_script_is_named():
    with pytest.raises(FileNotFoundError) as e:
        script(str(ROOT / "components" / "providers" / "file.py"), "no_such.sh")
    assert f"shell script {ROOT}/components/providers/scripts/no_such.sh is missing" in str(e.value)


#: a pipe into a grep that stops reading at its first match (-q, -m, --quiet, --max-count)
EARLY_GREP = re.compile(r"\|\s*grep\s+(?:-[A-Za-z]*[qm]|--quiet|--max-count)")
#: the workload's fault fixture that shows the seed's R2 on purpose
R2_FIXTURE = "tests/lab/workload_faults/pipefail.sh"


def test_no_pipefail_script_pipes_into_an_early_grep():
    """The seed's R2: under pipefail, `producer | grep -q x` fails when grep exits at its first
    match while the producer still writes (SIGPIPE, 141). It passes on a quiet machine and fails
    under load (a CI run's tailnet check read `tailscale0 does not hold` an address it held)."""
    found = []
    for rel in repo_sh_files():
        text = (ROOT / rel).read_text()
        if rel == R2_FIXTURE or "pipefail" not in text:
            continue
        found += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                  if EARLY_GREP.search(line) and not line.lstrip().startswith("#")]
    assert found == [], "capture the listing first, then grep a here-string:\n" + "\n".join(found)


def test_the_early_grep_rule_sees_the_fault_it_names():
    """The rule's pattern catches the fixture's line, and the fault is real: a producer that
    writes after grep -q matched fails the pipeline under pipefail."""
    assert EARLY_GREP.search((ROOT / R2_FIXTURE).read_text())
    producer = "echo match; sleep 0.2; echo more"
    piped = subprocess.run(["bash", "-c", f"set -o pipefail; {{ {producer}; }} | grep -q match"])
    captured = subprocess.run(["bash", "-c", f"set -o pipefail; out=$({producer}); grep -q match <<<\"$out\""])
    assert (piped.returncode, captured.returncode) == (141, 0)
