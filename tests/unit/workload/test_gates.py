"""The workload's media gates (issue 37, item 4): the parsers on ffmpeg's and ffprobe's own text,
and the gates as a process over real films made from a pure function of time (a moving sine
grating and a 440 Hz tone: STAND-IN for the video model's output), by the static FFmpeg 7.0.2 the
runtime pins (imageio-ffmpeg's, a pinned requirement): the gates' own tool. A good film
passes every gate; each of the seed's failures is refused by the gate that names it: 717 frames
(R4), clone-padded 720 frames (R5: motion), a skipped frame, a black stretch, a silent one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import imageio_ffmpeg
import pytest

from components.layers.workload.onhost import gates as g

GATES = Path(g.__file__)
FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()
W, H, FPS, SECONDS = 160, 90, 24, 30
#: the grating moves a third of its period a second: every frame differs from the one before
MOVING = "128+90*sin(2*PI*(X/W+N/72))"
TONE = "sine=f=440:r=32000:d=30"


# ---- parsers ---------------------------------------------------------------------------------

SHOWINFO = """[Parsed_showinfo_0 @ 0x7f] config in time_base: 1/12288, frame_rate: 24/1
[Parsed_showinfo_0 @ 0x7f] config out time_base: 0/0, frame_rate: 0/0
[Parsed_showinfo_0 @ 0x7f] n:   0 pts:      0 pts_time:0       duration:    512 duration_time:0.0416667 \
fmt:yuv420p cl:left sar:1/1 s:1216x768 i:P iskey:1 type:I checksum:0DAC17A0 mean:[128 128 128]
[Parsed_showinfo_0 @ 0x7f]   side data - H.26[45] User Data Unregistered SEI message
[Parsed_showinfo_0 @ 0x7f] n:   1 pts:    512 pts_time:0.0416667 duration:    512 duration_time:0.0416667 \
fmt:yuv420p cl:left sar:1/1 s:1216x768 i:P iskey:0 type:P checksum:1DAC17A0 mean:[128 128 128]
"""


def test_showinfo_gives_the_frames_their_pts_and_the_geometry_really_decoded():
    v = g.parse_showinfo(SHOWINFO)
    assert (v["frames"], v["width"], v["height"], v["fps"], v["pts"]) == (2, 1216, 768, 24.0, [0, 512])
    assert v["time_base"] == 1 / 12288 and v["sizes"] == ["1216x768"]
    with pytest.raises(g.GateError, match="saw no video frame"):
        g.parse_showinfo("[Parsed_showinfo_0 @ 0x7f] config in time_base: 1/12288, frame_rate: 24/1\n")


def test_pts_gaps_name_the_frame():
    assert g.pts_gaps([0, 512, 1024, 1536], 512) == []
    assert g.pts_gaps([0, 512, 1536, 2048], 512) == ["frame 2: pts 1536 after 512 (step 1024, want 512)"]


def test_the_audio_end_is_the_last_packets_end_as_framecrc_lists_them():
    text = ("#software: Lavf61.1.100\n#tb 0: 1/32000\n#media_type 0: audio\n"
            "0,      -1024,      -1024,     1024,      519, 0x9763ff55, F=0x5, S=1,       10\n"
            "0,     958464,     958464,     1024,      441, 0x0a0b0c0d\n"
            "0,     959488,     959488,      512,      439, 0xf9e5c060\n")
    assert g.parse_framecrc(text) == (960000, 32000)
    with pytest.raises(g.GateError, match="no audio packet"):
        g.parse_framecrc("#tb 0: 1/32000\n")


def test_ssim_ebur128_and_detectors_from_ffmpegs_own_text():
    assert g.parse_ssim("[Parsed_ssim_4 @ 0x5] SSIM Y:0.983 (17.7) U:0.99 (20.1) V:0.99 (20.5) "
                        "All:0.983828 (17.9)\n") == 0.983828
    summary = ("[Parsed_ebur128_0 @ 0x1] Summary:\n\n  Integrated loudness:\n    I:         -18.6 LUFS\n"
               "    Threshold: -28.7 LUFS\n\n  Loudness range:\n    LRA:         2.1 LU\n\n"
               "  True peak:\n    Peak:        -4.3 dBFS\n")
    assert g.parse_ebur128("noise I: -70.0 LUFS\n" + summary) == (-18.6, -4.3)
    assert g.parse_intervals("black", "[blackdetect @ 0x1] black_start:12 black_end:13.0417 "
                                      "black_duration:1.04167\n") == [(12.0, 13.0417)]
    assert g.parse_intervals("silence", "[silencedetect @ 0x1] silence_start: 5\n"
                                        "[silencedetect @ 0x1] silence_end: 6.00003 | silence_duration: 1\n"
                                        "[silencedetect @ 0x1] silence_start: 29.5\n") == [(5.0, 6.00003),
                                                                                          (29.5, -1.0)]
    with pytest.raises(g.GateError, match="no summary"):
        g.parse_ebur128("nothing")


def test_motion_outliers_find_one_frozen_or_skipped_frame_and_spare_stills():
    steady = [10.0] * 20
    assert g.motion_outliers(steady, low=0.3, high=1.7, min_motion=0.5) == []
    clone = steady[:9] + [0.1, 20.0] + steady[11:]  # frame 10 a copy of 9, frame 11 catches up
    assert g.motion_outliers(clone, low=0.3, high=1.7, min_motion=0.5) == [
        "frame 10 barely moves: 0.01 of its neighbours' motion (a frozen or cloned frame)",
        "frame 11 jumps: 2.00 times its neighbours' motion (a skipped frame)"]
    assert g.motion_outliers([0.0] * 20, low=0.3, high=1.7, min_motion=0.5) == []  # a still shot


def test_request_geometry_is_what_every_rank_printed_against_the_declared():
    spec = {"width": 320, "height": 180, "fps": 24, "segments": 3, "segment_frames": 240}
    printed = "".join(f"request_geometry 320x180 fps=24 frames=240 segment={k}/3 first_frame={240 * k}\n"
                      "srun: some other line\n" for k in range(3))
    ok = g.request_gate(spec, printed)
    assert ok["passed"] and ok["figure"] == {str(k): "320x180 fps=24 frames=240 of 3" for k in range(3)}, ok
    dropped = printed.replace("320x180 fps=24 frames=240 segment=1", "1216x768 fps=24 frames=240 segment=1")
    bad = g.request_gate(spec, dropped.replace("segment=2/3", "segment=9/3"))
    assert not bad["passed"] and bad["problems"] == [
        "segment 1 received 1216x768 fps=24 frames=240 of 3, the stack declared 320x180 fps=24 frames=240 of 3",
        "segment 2 printed no request_geometry line", "segment 9 printed, but the film has 3 segments"]
    assert g.request_gate(spec, None)["problems"][0] == "segment 0 printed no request_geometry line"


# ---- the gates on real films ---------------------------------------------------------------------

def film(tmp_path: Path, name: str, lum: str = MOVING, seconds: float = SECONDS, audio: str = TONE) -> Path:
    out = tmp_path / f"{name}.mp4"
    subprocess.run([FFMPEG, "-hide_banner", "-loglevel", "error", "-y",
                    "-f", "lavfi", "-i", f"color=c=gray:s={W}x{H}:r={FPS}:d={seconds},format=yuv420p,"
                                         f"geq=lum='{lum}':cb=128:cr=128",
                    "-f", "lavfi", "-i", audio, "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                    "-c:a", "aac", "-ar", "32000", "-ac", "2", "-t", str(SECONDS), str(out)], check=True, timeout=120)
    return out


def spec(tmp_path: Path, **over) -> Path:
    doc = {"ffmpeg": FFMPEG, "frames": FPS * SECONDS, "width": W, "height": H, "fps": FPS,
           "duration_s": SECONDS, "audio_rate": 32000, "joins": [240, 480], "anchors": [],
           "thresholds": {"join_ssim": 0.97, "endpoint_ssim": 0.99, "motion_low": 0.3, "motion_high": 1.7,
                          "motion_min": 0.5, "black_s": 0.5, "silence_db": -50, "silence_s": 0.1,
                          "lufs_min": -30, "lufs_max": -14, "true_peak_max": -1.0}, **over}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    return path


def judge(tmp_path: Path, mp4: Path, **over) -> tuple[int, dict, str]:
    out = tmp_path / "verification.json"
    p = subprocess.run([sys.executable, str(GATES), str(spec(tmp_path, **over)), str(mp4), str(out)],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, json.loads(out.read_text()) if out.exists() else {}, p.stdout + p.stderr


def failed(result: dict) -> dict[str, list[str]]:
    return {x["name"]: x["problems"] for x in result["gates"] if not x["passed"]}


def test_a_good_film_passes_every_gate_with_its_figures(tmp_path):
    mp4 = film(tmp_path, "good")
    anchor = tmp_path / "anchor-240.png"  # the frozen anchor the next segment starts from
    subprocess.run([FFMPEG, "-loglevel", "error", "-i", str(mp4), "-vf", "select=eq(n\\,240)", "-frames:v", "1",
                    str(anchor)], check=True)
    rc, res, text = judge(tmp_path, mp4, anchors=[{"frame": 240, "image": str(anchor)}])
    assert rc == 0 and res["passed"], text
    figures = {x["name"]: x["figure"] for x in res["gates"]}
    assert figures["frames"] == 720 and figures["pts"] == {"frames": 720, "gaps": 0}
    assert figures["audio_end"] == {"ticks": 960000, "rate": 32000}
    assert min(figures["joins"].values()) >= 0.97 and list(figures["endpoints"].values())[0] >= 0.99
    assert figures["motion"] == {"frames_judged": 719, "outliers": 0}
    assert -30 <= figures["loudness"]["lufs"] <= -14 and figures["loudness"]["true_peak_dbfs"] <= -1
    assert {x["name"] for x in res["gates"]} == {"frames", "geometry", "pts", "decode", "audio_end", "joins",
                                                 "endpoints", "motion", "black", "silence", "loudness"}


def test_717_frames_fail_the_count(tmp_path):
    rc, res, _ = judge(tmp_path, film(tmp_path, "short", seconds=SECONDS - 3 / FPS))
    assert rc == 1 and "frames" in failed(res)
    assert next(x for x in res["gates"] if x["name"] == "frames")["figure"] == 717


def test_clone_padded_720_frames_pass_structure_and_fail_motion(tmp_path):
    # the seed's R5: each 240-frame segment's last frame a copy of the one before
    rc, res, text = judge(tmp_path, film(tmp_path, "clone", "128+90*sin(2*PI*(X/W+(N-eq(mod(N+1\\,240)\\,0))/72))"))
    bad = failed(res)
    assert rc == 1 and set(bad) == {"motion"}, text
    assert any(p.startswith("frame 239 barely moves") for p in bad["motion"])
    assert any(p.startswith("frame 479 barely moves") for p in bad["motion"])


def test_a_skipped_frame_fails_motion(tmp_path):
    rc, res, _ = judge(tmp_path, film(tmp_path, "skip", "128+90*sin(2*PI*(X/W+(N+gte(N\\,300))/72))"))
    bad = failed(res)
    assert rc == 1 and set(bad) == {"motion"} and len(bad["motion"]) == 1, bad
    assert bad["motion"][0].startswith("frame 300 jumps: 2.0"), bad


def test_black_and_silent_stretches_fail_their_gates(tmp_path):
    mp4 = film(tmp_path, "dark", f"if(between(T\\,12\\,13)\\,16\\,{MOVING})",
               audio="aevalsrc='if(between(t\\,5\\,6)\\,0\\,0.12*sin(2*PI*440*t))':s=32000:d=30")
    rc, res, _ = judge(tmp_path, mp4)
    bad = failed(res)
    assert rc == 1 and bad["black"][0].startswith("black from 12.000 s") and bad["silence"][0].startswith(
        "silent from 5.000 s to 6.000 s"), bad


def test_a_tool_that_cannot_run_is_a_clear_error(tmp_path):
    rc, res, text = judge(tmp_path, film(tmp_path, "good"), ffmpeg=str(tmp_path / "no-ffmpeg"))
    assert rc == 3 and res == {} and "no-ffmpeg" in text
