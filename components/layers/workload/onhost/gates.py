#!/usr/bin/python3
"""gpu-fleet media gates: what a film must prove before it is published (issue 37, the seed's R0-R6).

Run on a node inside the QA job, with the runtime's pinned ffmpeg by absolute path (never the
batch PATH's: the seed's R0 had none): `gates.py SPEC.json FILM.mp4 OUT.json [RENDER_LOG]`. ffmpeg alone
answers every gate but `request_geometry` (a static build ships no ffprobe): each gate runs it once, captures its whole
output first and only then parses it (the seed's R2: `grep -q` under pipefail killed the producer
with SIGPIPE), and records its figure:

- `frames`: the decoded frame count (the `showinfo` filter's lines) is the declared one (717 is
  not 720);
- `pts`: presentation timestamps continuous, one frame duration apart;
- `geometry`: width, height and frame rate as declared, read back from the film;
- `request_geometry`: what every render rank printed it received before its heavy step (the
  render job's output: `request_geometry WxH fps=F frames=N segment=K/S`), as declared, one line
  for every segment (the seed's G1-G3: a launcher that dropped the geometry);
- `decode`: a strict full decode of video and audio (`ffmpeg -xerror`) ends cleanly;
- `audio_end`: the last audio packet ends at the declared tick (960,000 at 32 kHz for 30 s; the
  packets as the `framecrc` muxer lists them, copied, not decoded);
- `joins`: SSIM between the two frames of every join at least the stack's threshold;
- `endpoints`: SSIM of each declared frame against its frozen anchor image;
- `motion`: no single frame frozen or skipped (per-frame difference against its neighbours: a
  clone-padded frame moves ~0 and the next one twice as much; freezedetect misses one frame);
- `black`, `silence`: no black or silent stretch (`blackdetect`, `silencedetect`);
- `loudness`: integrated loudness and true peak within bounds (`ebur128=peak=true`).

Prints the verdict; writes OUT.json (`verification.json`); exits 0 only when every gate passed.
Python 3's standard library only; nothing from `components` (tests/unit/test_imports.py).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from typing import Any, Optional, Sequence

Gate = dict[str, Any]


class GateError(Exception):
    """A tool that could not be run or answered nothing a gate can read."""


def run(argv: Sequence[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """The whole output, captured before anything reads it."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GateError(f"{argv[0]}: {e}") from None


# ---- parsers (pure) --------------------------------------------------------------------------

_CONFIG = re.compile(r"config in time_base: (\d+)/(\d+), frame_rate: (\d+)/(\d+)")
_FRAME = re.compile(r"\] n:\s*(\d+) pts:\s*(-?\d+) .*? s:(\d+)x(\d+) ")


def parse_showinfo(stderr: str) -> dict[str, Any]:
    """The `showinfo` filter's lines: every decoded frame's pts and size, the stream's time base
    and frame rate."""
    config = _CONFIG.search(stderr)
    frames = [(int(n), int(pts), f"{w}x{h}") for n, pts, w, h in _FRAME.findall(stderr)]
    if config is None or not frames:
        raise GateError("ffmpeg's showinfo filter saw no video frame")
    tb_num, tb_den, fr_num, fr_den = (int(x) for x in config.groups())
    sizes = sorted({size for _, _, size in frames})
    width, _, height = sizes[0].partition("x")
    return {"frames": len(frames), "width": int(width), "height": int(height), "sizes": sizes,
            "fps": round(fr_num / fr_den, 6) if fr_den else 0.0, "time_base": tb_num / tb_den,
            "pts": [pts for _, pts, _ in frames]}


def pts_gaps(pts: Sequence[int], step: int) -> list[str]:
    """Where consecutive presentation timestamps are not `step` apart (in the stream's time base)."""
    return [f"frame {i}: pts {b} after {a} (step {b - a}, want {step})"
            for i, (a, b) in enumerate(zip(pts, pts[1:]), start=1) if b - a != step]


def parse_framecrc(text: str) -> tuple[int, int]:
    """(where the last audio packet ends, in its time base; the time base's denominator) from the
    `framecrc` muxer's listing (`#tb 0: 1/32000`, then `stream, dts, pts, duration, size, crc`)."""
    tb = re.search(r"^#tb 0: 1/(\d+)$", text, re.M)
    ends = [int(m.group(1)) + int(m.group(2))
            for m in re.finditer(r"^0,\s*-?\d+,\s*(-?\d+),\s*(\d+),", text, re.M)]
    if tb is None or not ends:
        raise GateError("ffmpeg listed no audio packet")
    return max(ends), int(tb.group(1))


_SSIM = re.compile(r"SSIM .*All:([0-9.]+)")


def parse_ssim(stderr: str) -> float:
    found = _SSIM.findall(stderr)
    if not found:
        raise GateError("ffmpeg's ssim filter printed no result")
    return float(found[-1])


def parse_frame_values(text: str, key: str) -> list[float]:
    """`metadata=mode=print` lines: one value of `key` per frame, in frame order."""
    return [float(m) for m in re.findall(rf"{re.escape(key)}=([-0-9.]+)", text)]


def motion_outliers(diffs: Sequence[float], *, low: float, high: float, min_motion: float,
                    window: int = 4) -> list[str]:
    """Frames whose difference to the one before is below `low` or above `high` times the median
    of their neighbours' (`window` each side); a still stretch (median under `min_motion`) is not
    judged. `diffs[i]` is frame i+1 against frame i."""
    out = []
    for i, d in enumerate(diffs):
        near = [diffs[j] for j in range(max(0, i - window), min(len(diffs), i + window + 1)) if j != i]
        med = statistics.median(near) if near else 0.0
        if med < min_motion:
            continue
        ratio = d / med
        if ratio < low:
            out.append(f"frame {i + 1} barely moves: {ratio:.2f} of its neighbours' motion (a frozen or cloned frame)")
        elif ratio > high:
            out.append(f"frame {i + 1} jumps: {ratio:.2f} times its neighbours' motion (a skipped frame)")
    return out


_INTERVAL = {"black": re.compile(r"black_start:([0-9.]+) black_end:([0-9.]+)"),
             "silence": re.compile(r"silence_start: ([0-9.]+)(?:.|\n)*?silence_end: ([0-9.]+)")}


def parse_intervals(kind: str, stderr: str) -> list[tuple[float, float]]:
    """blackdetect's or silencedetect's (start, end) stretches; a silence to the end of the
    stream has no end line: it ends at -1."""
    found = [(float(a), float(b)) for a, b in _INTERVAL[kind].findall(stderr)]
    if kind == "silence":
        starts = re.findall(r"silence_start: ([0-9.]+)", stderr)
        if len(starts) > len(found):
            found.append((float(starts[-1]), -1.0))
    return found


REQUEST = re.compile(r"^request_geometry (\d+)x(\d+) fps=(\d+(?:\.\d+)?) frames=(\d+) segment=(\d+)/(\d+)\b")


def parse_request_geometry(text: str) -> dict[int, str]:
    """A render job's output -> segment -> what its rank printed (`WxH fps=F frames=N of S`)."""
    out = {}
    for line in text.splitlines():
        m = REQUEST.match(line.strip())
        if m:
            w, h, fps, frames, k, n = m.groups()
            out[int(k)] = f"{w}x{h} fps={float(fps):g} frames={frames} of {n}"
    return out


def parse_ebur128(stderr: str) -> tuple[float, float]:
    """(integrated loudness in LUFS, true peak in dBFS) from ebur128's summary."""
    summary = stderr[stderr.rfind("Summary:"):]
    i = re.search(r"I:\s+(-?[0-9.]+|-inf) LUFS", summary)
    p = re.search(r"True peak:\s+Peak:\s+(-?[0-9.]+|-inf) dBFS", summary)
    if not (i and p):
        raise GateError("ffmpeg's ebur128 filter printed no summary")
    return float(i.group(1)), float(p.group(1))


# ---- the gates -------------------------------------------------------------------------------

def gate(name: str, passed: bool, figure: Any, want: Any, problems: Sequence[str] = ()) -> Gate:
    return {"name": name, "passed": bool(passed), "figure": figure, "want": want, "problems": list(problems)[:20]}


def ffmpeg_on(ffmpeg: str, film: str, *args: str) -> subprocess.CompletedProcess:
    """One run of ffmpeg over the film (decoding it into `args`), output captured whole."""
    return run([ffmpeg, "-hide_banner", "-nostats", "-i", film, *args])


def _frame_pair_ssim(ffmpeg: str, film: str, a: int, b: int) -> float:
    graph = (f"[0:v]split[p][q];[p]select='eq(n\\,{a})',setpts=PTS-STARTPTS[x];"
             f"[q]select='eq(n\\,{b})',setpts=PTS-STARTPTS[y];[x][y]ssim")
    return parse_ssim(ffmpeg_on(ffmpeg, film, "-lavfi", graph, "-f", "null", "-").stderr)


def _anchor_ssim(ffmpeg: str, film: str, frame: int, image: str) -> float:
    graph = f"[0:v]select='eq(n\\,{frame})',setpts=PTS-STARTPTS[x];[1:v]setpts=PTS-STARTPTS[y];[x][y]ssim"
    return parse_ssim(ffmpeg_on(ffmpeg, film, "-i", image, "-lavfi", graph, "-f", "null", "-").stderr)


def request_gate(spec: dict, render_log: Optional[str]) -> Gate:
    """Every segment's printed geometry against the declared one (no log: every segment unproven)."""
    n = spec["segments"]
    want = f"{spec['width']}x{spec['height']} fps={float(spec['fps']):g} frames={spec['segment_frames']} of {n}"
    printed = parse_request_geometry(render_log or "")
    problems = [f"segment {k} printed no request_geometry line" if k not in printed else
                f"segment {k} received {printed[k]}, the stack declared {want}"
                for k in range(n) if printed.get(k) != want]
    problems += [f"segment {k} printed, but the film has {n} segments" for k in sorted(printed) if k >= n]
    return gate("request_geometry", not problems, {str(k): v for k, v in sorted(printed.items())}, want, problems)


def check(spec: dict, film: str, render_log: Optional[str] = None) -> list[Gate]:
    """Every gate of `spec` on `film` (see the module's docstring); `request_geometry` where the
    spec names the segments, from the render job's output `render_log`."""
    ffmpeg, th = spec["ffmpeg"], spec["thresholds"]
    gates: list[Gate] = []
    if "segments" in spec:
        gates.append(request_gate(spec, render_log))
    v = parse_showinfo(ffmpeg_on(ffmpeg, film, "-map", "0:v:0", "-vf", "showinfo", "-f", "null", "-").stderr)
    gates.append(gate("frames", v["frames"] == spec["frames"], v["frames"], spec["frames"]))
    want_geo = {"width": spec["width"], "height": spec["height"], "fps": float(spec["fps"])}
    geo = {k: v[k] for k in want_geo}
    gates.append(gate("geometry", geo == want_geo and len(v["sizes"]) == 1, geo, want_geo,
                      [f"frame sizes {v['sizes']}"] if len(v["sizes"]) > 1 else []))
    step = round(1 / (v["time_base"] * float(spec["fps"]))) if v["time_base"] else 0
    gaps = pts_gaps(v["pts"], step)
    gates.append(gate("pts", not gaps, {"frames": len(v["pts"]), "gaps": len(gaps)}, {"step": step}, gaps))

    strict = run([ffmpeg, "-hide_banner", "-nostats", "-v", "error", "-xerror", "-i", film, "-f", "null", "-"])
    errors = [ln for ln in strict.stderr.splitlines() if ln.strip()]
    gates.append(gate("decode", strict.returncode == 0 and not errors, {"rc": strict.returncode},
                      {"rc": 0}, errors))

    end, rate = parse_framecrc(ffmpeg_on(ffmpeg, film, "-map", "0:a:0", "-c", "copy", "-f", "framecrc", "-").stdout)
    want_end = int(round(float(spec["duration_s"]) * spec["audio_rate"]))
    gates.append(gate("audio_end", (end, rate) == (want_end, spec["audio_rate"]), {"ticks": end, "rate": rate},
                      {"ticks": want_end, "rate": spec["audio_rate"]}))

    joins = {str(j): _frame_pair_ssim(ffmpeg, film, j - 1, j) for j in spec.get("joins", [])}
    low_joins = [f"join at frame {j}: SSIM {s:.6f} < {th['join_ssim']}" for j, s in joins.items()
                 if s < th["join_ssim"]]
    gates.append(gate("joins", not low_joins, joins, {"min_ssim": th["join_ssim"]}, low_joins))

    ends = {f"{a['frame']}:{a['image']}": _anchor_ssim(ffmpeg, film, a["frame"], a["image"])
            for a in spec.get("anchors", [])}
    low_ends = [f"frame {k.split(':')[0]} against its anchor: SSIM {s:.6f} < {th['endpoint_ssim']}"
                for k, s in ends.items() if s < th["endpoint_ssim"]]
    gates.append(gate("endpoints", not low_ends, ends, {"min_ssim": th["endpoint_ssim"]}, low_ends))

    key = "lavfi.signalstats.YAVG"
    diff = ffmpeg_on(ffmpeg, film, "-vf", f"tblend=all_mode=difference,signalstats,metadata=mode=print:key={key}:file=-",
                     "-f", "null", "-")
    diffs = parse_frame_values(diff.stdout, key)
    odd = motion_outliers(diffs, low=th["motion_low"], high=th["motion_high"], min_motion=th["motion_min"])
    gates.append(gate("motion", len(diffs) == v["frames"] - 1 and not odd,
                      {"frames_judged": len(diffs), "outliers": len(odd)},
                      {"low": th["motion_low"], "high": th["motion_high"]}, odd))

    black = parse_intervals("black", ffmpeg_on(ffmpeg, film, "-vf", f"blackdetect=d={th['black_s']}:pix_th=0.10",
                                               "-an", "-f", "null", "-").stderr)
    gates.append(gate("black", not black, black, {"longer_than_s": th["black_s"]},
                      [f"black from {a:.3f} s to {b:.3f} s" for a, b in black]))
    silent = parse_intervals("silence", ffmpeg_on(ffmpeg, film, "-af",
                                                  f"silencedetect=n={th['silence_db']}dB:d={th['silence_s']}",
                                                  "-vn", "-f", "null", "-").stderr)
    gates.append(gate("silence", not silent, silent, {"below_db": th["silence_db"], "longer_than_s": th["silence_s"]},
                      [f"silent from {a:.3f} s to {'the end' if b < 0 else f'{b:.3f} s'}" for a, b in silent]))

    lufs, peak = parse_ebur128(ffmpeg_on(ffmpeg, film, "-af", "ebur128=peak=true", "-vn", "-f", "null", "-").stderr)
    lo, hi, max_peak = th["lufs_min"], th["lufs_max"], th["true_peak_max"]
    gates.append(gate("loudness", lo <= lufs <= hi and peak <= max_peak, {"lufs": lufs, "true_peak_dbfs": peak},
                      {"lufs": [lo, hi], "true_peak_max": max_peak}))
    return gates


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (3, 4):
        print("usage: gates.py SPEC.json FILM.mp4 OUT.json [RENDER_LOG]", file=sys.stderr)
        return 2
    spec_path, film, out = args[:3]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    render_log = None
    if len(args) == 4 and os.path.isfile(args[3]):
        with open(args[3], encoding="utf-8", errors="replace") as f:
            render_log = f.read()
    if "ffmpeg" not in spec and os.environ.get("RT"):  # in a job: the runtime's own, by path
        spec["ffmpeg"] = os.path.join(os.environ["RT"], "bin", "ffmpeg")
    try:
        gates = check(spec, film, render_log)
    except GateError as e:
        print(f"gpu-fleet gates: {film}: {e}", file=sys.stderr)
        return 3
    passed = all(g["passed"] for g in gates)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"film": film, "passed": passed, "gates": gates}, f, indent=1, sort_keys=True)
        f.write("\n")
    for g in gates:
        print(f"{'PASS' if g['passed'] else 'FAIL'} {g['name']}: {json.dumps(g['figure'], sort_keys=True)}"
              + "".join(f"\n  - {p}" for p in g["problems"]))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
