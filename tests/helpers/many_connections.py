"""A capture of many short TCP connections, built with numpy (scapy would take minutes for a
few hundred thousand): connection i is SYN, SYN-ACK, ACK, FIN from client port 10000 + i % 50000
of 10.1.x.1 (x = 1 + i // 50000) to 10.0.0.2:80, 100 us apart. No options; the ACK carries
`payload[i]` bytes (none by default), captured with a snapshot length of the headers only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

_FRAME = 54  # Ethernet, IPv4 and TCP headers
_FLAGS = (0x02, 0x12, 0x10, 0x11)  # SYN, SYN-ACK, ACK, FIN-ACK
_ISN_CLIENT, _ISN_SERVER = 1000, 5000


def write_connections(path: Path, n: int, payload: np.ndarray | None = None) -> Path:
    """Write the capture of `n` connections as a classic pcap (microseconds); returns path."""
    per = len(_FLAGS)
    data = np.zeros(n * per, np.int64)
    if payload is not None:
        data[2::per] = payload
    conn = np.repeat(np.arange(n), per)
    kind = np.tile(np.arange(per), n)
    records = np.zeros((n * per, 16 + _FRAME), np.uint8)
    t_us = 1_000_000 + conn * 100 + kind * 10
    header = records[:, :16].view("<u4")
    header[:, 0], header[:, 1] = t_us // 1_000_000, t_us % 1_000_000
    header[:, 2] = _FRAME
    header[:, 3] = _FRAME + data
    frame = records[:, 16:]
    frame[:, 12:14] = (8, 0)  # IPv4
    frame[:, 14], frame[:, 22], frame[:, 23] = 0x45, 64, 6
    frame[:, 16:18] = (40 + data).astype(">u2")[:, None].view(np.uint8)
    client = np.zeros((n * per, 4), np.uint8)
    client[:, 0], client[:, 1], client[:, 3] = 10, 1 + conn // 50000, 1
    server = np.array([10, 0, 0, 2], np.uint8)
    to_server = (kind != 1)[:, None]
    frame[:, 26:30] = np.where(to_server, client, server)
    frame[:, 30:34] = np.where(to_server, server, client)
    ports = np.stack([10000 + conn % 50000, np.full(n * per, 80)], 1).astype(">u2")
    ports[kind == 1] = ports[kind == 1, ::-1]
    frame[:, 34:38] = ports.view(np.uint8)
    fin = _ISN_CLIENT + 1 + np.repeat(data[2::per], per)
    seq = np.choose(kind, [_ISN_CLIENT, _ISN_SERVER, _ISN_CLIENT + 1, fin])
    ack = np.choose(kind, [0, _ISN_CLIENT + 1, _ISN_SERVER + 1, _ISN_SERVER + 1])
    frame[:, 38:46] = np.stack([seq, ack], 1).astype(">u4").view(np.uint8)
    frame[:, 46] = 5 << 4
    frame[:, 47] = np.array(_FLAGS, np.uint8)[kind]
    frame[:, 48] = 0x20  # window 8192
    head = np.array([0xA1B2C3D4, 0x00040002, 0, 0, 65535, 1], "<u4")
    path.write_bytes(head.tobytes() + records.tobytes())
    return path
