"""The fleet acceptance report as a page a person reads and a JSON file a program reads.

Pure: the report dict in, text out (`render_html`); `write_report` only writes the two files.
The page is self-contained (inline CSS, no script, nothing fetched) so it opens from a file or
an archive, and stable (its only time is `report["generated"]`, dicts in the order given) so a
rerun with the same results gives the same bytes. Every value is escaped: `seen` holds what
hosts printed. Green means met or passed, nothing else: an unbuilt criterion is grey, never green.

The report dict::

    {"stack": "lab", "generated": "2026-12-03T20:00:00Z", "slurm": "22.05",
     "partitions": {"names": ["lab"], "state": "UP"},       # or "INACTIVE": left closed
     "min_nodes": 3,
     "nodes": {"node1": {"passed": True, "jobs": ["12"], "reason": None,   # reason: why it failed
                         "checks": [{"name": "nvml", "passed": True, "seen": "..."}]}},
     "fleet_job": {"job_id": "15", "nodes": ["node1"], "gpus": 8, "alloc_tres": "...",
                   "passed": True, "checks": [...]},        # or None: no all-node job ran
     "criteria": [{"id": 1, "title": "...", "status": "met",  # met | failed | not built | ...
                   "layer": "acceptance", "evidence": ["..."]}]}   # the seven criteria
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

CSS = """\
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.check { padding-left: 2em; }
ul { margin: 0; padding-left: 1.2em; }
.badge { display: inline-block; padding: 0.1em 0.5em; border-radius: 0.6em; color: #fff; }
.green { background: #2e7d32; }
.red { background: #c62828; }
.grey { background: #757575; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _badge(text: Any, colour: str) -> str:
    return f'<span class="badge {colour}">{_e(text)}</span>'


def _status(status: Any) -> str:
    """Green only for exactly "met": a status this page does not know is grey, not success."""
    colour = "green" if status == "met" else "red" if status == "failed" else "grey"
    return _badge(status, colour)


def _verdict(passed: Any) -> str:
    return _badge("passed", "green") if passed is True else _badge("failed", "red")


def _list(items: Any) -> str:
    return "<ul>" + "".join(f"<li>{_e(i)}</li>" for i in items or ()) + "</ul>"


def _check_rows(checks: Any, span: int) -> list[str]:
    """One row per check under its node's (or job's) row; `seen` spans the remaining columns."""
    return [f'<tr><td class="check">{_e(c.get("name"))}</td><td>{_verdict(c.get("passed"))}</td>'
            f'<td colspan="{span}">{_e(c.get("seen"))}</td></tr>' for c in checks or ()]


def _summary(report: dict[str, Any]) -> str:
    nodes = report.get("nodes") or {}
    passed = sum(1 for n in nodes.values() if n.get("passed") is True)
    parts = report.get("partitions") or {}
    names = ", ".join(str(n) for n in parts.get("names") or ()) or "(none)"
    state = parts.get("state")
    opened = ("opened (UP)" if state == "UP" else "kept INACTIVE" if state == "INACTIVE"
              else f"state {state}")
    return (f'<p class="summary">Stack <b>{_e(report.get("stack"))}</b>, generated '
            f'{_e(report.get("generated"))}, Slurm {_e(report.get("slurm"))}: '
            f'<b>{passed} of {len(nodes)} nodes passed</b> (at least {_e(report.get("min_nodes"))} '
            f'needed); partitions {_e(names)} {_e(opened)}.</p>')


def _criteria(criteria: Any) -> list[str]:
    out = ["<h2>The seven criteria</h2>", '<table class="criteria">',
           "<tr><th>#</th><th>Criterion</th><th>Status</th><th>Layer</th><th>Evidence</th></tr>"]
    for c in criteria or ():
        out.append(f'<tr><td>{_e(c.get("id"))}</td><td>{_e(c.get("title"))}</td>'
                   f'<td>{_status(c.get("status"))}</td><td>{_e(c.get("layer"))}</td>'
                   f'<td>{_list(c.get("evidence"))}</td></tr>')
    out.append("</table>")
    return out


def _nodes(nodes: Any) -> list[str]:
    out = ["<h2>Nodes</h2>"]
    for name, node in (nodes or {}).items():
        jobs = ", ".join(str(j) for j in node.get("jobs") or ()) or "(none)"
        out += ['<table class="node">',
                "<tr><th>Node</th><th>Result</th><th>Jobs</th><th>Reason</th></tr>",
                f'<tr><td>{_e(name)}</td><td>{_verdict(node.get("passed"))}</td>'
                f'<td>{_e(jobs)}</td><td>{_e(node.get("reason"))}</td></tr>',
                *_check_rows(node.get("checks"), 2), "</table>"]
    return out


def _fleet_job(job: Any) -> list[str]:
    if job is None:
        return []
    nodes = ", ".join(str(n) for n in job.get("nodes") or ())
    return ["<h2>The all-node job</h2>", '<table class="fleet-job">',
            "<tr><th>Job</th><th>Nodes</th><th>GPUs</th><th>AllocTRES</th><th>Result</th></tr>",
            f'<tr><td>{_e(job.get("job_id"))}</td><td>{_e(nodes)}</td><td>{_e(job.get("gpus"))}</td>'
            f'<td>{_e(job.get("alloc_tres"))}</td><td>{_verdict(job.get("passed"))}</td></tr>',
            *_check_rows(job.get("checks"), 3), "</table>"]


def render_html(report: dict[str, Any]) -> str:
    """The report as one HTML5 page; the same report always gives the same text."""
    title = f"gpu-fleet acceptance: {_e(report.get('stack'))}"
    lines = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{title}</title>", f"<style>\n{CSS}</style>", "</head>", "<body>",
             f"<h1>{title}</h1>", _summary(report), *_criteria(report.get("criteria")),
             *_nodes(report.get("nodes")), *_fleet_job(report.get("fleet_job")),
             "</body>", "</html>"]
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    """Temp file in the same directory, then rename: a reader sees the old file or the new one,
    never half of one, even if the run is killed mid-write."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; the report is not a secret
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_report(report: dict[str, Any], directory: Path, stack: str) -> tuple[Path, Path]:
    """Write `<stack>.json` and `<stack>.html` under `directory` (made if missing);
    returns (html_path, json_path)."""
    if not stack or stack.startswith(".") or "/" in stack or os.sep in stack:
        raise ValueError(f"stack name {stack!r} is not a plain file name")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{stack}.json"
    html_path = directory / f"{stack}.html"
    _write_atomic(json_path, json.dumps(report, indent=2, sort_keys=False) + "\n")
    _write_atomic(html_path, render_html(report))
    return html_path, json_path


def replace_row(directory: Path, stack: str, row: dict[str, Any]) -> Optional[Path]:
    """A later layer's verdict on its criterion written into the report an acceptance wrote
    (the row of the same id); None when there is no report to complete."""
    path = Path(directory) / f"{stack}.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    report["criteria"] = [row if c.get("id") == row["id"] else c for c in report.get("criteria") or ()]
    return write_report(report, directory, stack)[0]
