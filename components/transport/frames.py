"""The framing batch.sh and sequence.sh put around each command's result in one SSH command's
stdout: "<tag><n> <exit code> <stdout bytes> <stderr bytes>\\n", then those bytes, stdout first.
Byte counts, not markers, so no output can pass for a frame."""

from __future__ import annotations

from typing import Optional


def split(out: bytes, tag: bytes, n: Optional[int] = None) -> list[tuple[int, bytes, bytes]]:
    """out -> (exit code, stdout, stderr) per frame, in order: exactly n of them when n is given,
    else as many as there are. ValueError when a frame is missing, out of order or short (the
    command was cut off)."""
    got: list[tuple[int, bytes, bytes]] = []
    pos = 0
    while (len(got) < n) if n is not None else (pos < len(out)):
        i = len(got) + 1
        if not out.startswith(tag, pos):
            raise ValueError(f"frame {i}{f' of {n}' if n else ''} missing at byte {pos}")
        eol = out.index(b"\n", pos)
        idx, rc, n_out, n_err = (int(x) for x in out[pos + len(tag):eol].split())
        if idx != i:
            raise ValueError(f"frame {idx} where {i} was expected")
        start = eol + 1
        end = start + n_out + n_err
        if end > len(out):
            raise ValueError(f"frame {i}{f' of {n}' if n else ''} is short")
        got.append((rc, out[start:start + n_out], out[start + n_out:end]))
        pos = end
    return got
