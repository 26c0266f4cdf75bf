"""The bridge's binary frames (docs/bridge.md, "Binary frames"): step or reset many sessions in
one round trip; observations arrive as raw little-endian arrays and masks as bitsets."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

MAGIC = 0xB5
VERSION = 1
STEP, RESET_SEED, RESET = 1, 2, 3

_HEAD = struct.Struct("<BBHI")
_ENTRY = struct.Struct("<QQI")
_RECORD = struct.Struct("<BBBBIddddI")  # status .. observation byte count
_U32 = struct.Struct("<I")


@dataclass
class Record:
    """One entry's outcome. `error` is "type: message" when the entry failed (nothing else is
    set then); `message` is info.error or an illegal action's legality message."""
    ok: bool
    terminated: bool = False
    truncated: bool = False
    illegal_action: bool = False
    action_had_no_effect: bool = False
    step: int = 0
    reward: float = 0.0
    time_s: float = 0.0
    initial_time_s: float = 0.0
    best_time_s: float = 0.0
    observation: Optional[bytes | memoryview] = None
    mask: Optional[np.ndarray] = None
    message: str = ""
    error: Optional[str] = None
    has_error: bool = False


def encode(request_id: int, entries: Sequence[tuple[int, int, int]]) -> bytes:
    """(session, value, kind) entries: kind STEP (value = action), RESET_SEED, RESET."""
    out = bytearray(_HEAD.pack(MAGIC, VERSION, len(entries), request_id & 0xFFFFFFFF))
    for session, value, kind in entries:
        out += _ENTRY.pack(session, value, kind)
    return bytes(out)


def decode(body: bytes, n_actions: Sequence[int]) -> tuple[int, list[Record]]:
    """The reply's id and records; `n_actions[i]` is entry i's action count (mask length)."""
    magic, version, count, rid = _HEAD.unpack_from(body, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a binary reply (magic {magic:#x}, version {version})")
    if count != len(n_actions):
        raise ValueError(f"the reply has {count} records for {len(n_actions)} entries")
    view = memoryview(body)
    pos = _HEAD.size
    records = []
    for i in range(count):
        (status, term, trunc, flags, step, reward, t, t0, best, obs_n) = _RECORD.unpack_from(body, pos)
        pos += _RECORD.size
        obs = view[pos:pos + obs_n]
        pos += obs_n
        (mask_n,) = _U32.unpack_from(body, pos)
        pos += 4
        mask_bits = np.frombuffer(body, dtype=np.uint8, count=mask_n, offset=pos)
        pos += mask_n
        (msg_n,) = _U32.unpack_from(body, pos)
        pos += 4
        msg = bytes(view[pos:pos + msg_n]).decode("utf-8", errors="replace")
        pos += msg_n
        if status != 0:
            records.append(Record(ok=False, error=msg))
            continue
        records.append(Record(ok=True, terminated=bool(term), truncated=bool(trunc),
                              illegal_action=bool(flags & 1), action_had_no_effect=bool(flags & 2),
                              has_error=bool(flags & 4), step=step, reward=reward, time_s=t,
                              initial_time_s=t0, best_time_s=best, observation=obs,
                              mask=np.unpackbits(mask_bits, count=n_actions[i]).astype(np.int8),
                              message=msg))
    if pos != len(body):
        raise ValueError(f"binary reply: {len(body) - pos} bytes after the last record")
    return rid, records
