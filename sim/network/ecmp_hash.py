"""The ECMP route hash of :meth:`sim.topology.cluster.Cluster.path`, vectorised over numpy arrays.

``Cluster.path`` hashes a transfer ``s -> d`` on channel ``c`` as ``zlib.crc32(f"{s}>{d}#{c}")``;
:func:`route_hashes` computes the same CRC-32 (polynomial 0xEDB88320, table-driven) for whole
arrays of transfers at once, so that the all-to-all classes (:mod:`sim.network.alltoall`) route
a million transfers without a Python loop.
"""

from __future__ import annotations

import numpy as np


def _crc_table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(0xEDB88320), t >> 1).astype(np.uint32)
    return t


_CRC = _crc_table()


def _feed(crc: np.ndarray, byte, active=None) -> np.ndarray:
    new = _CRC[(crc ^ np.asarray(byte, dtype=np.uint32)) & 0xFF] ^ (crc >> 8)
    return new if active is None else np.where(active, new, crc)


def _feed_number(crc: np.ndarray, x: np.ndarray) -> np.ndarray:
    top = max(1, len(str(int(x.max())))) if len(x) else 1
    for p in range(top - 1, -1, -1):
        scale = 10 ** p
        crc = _feed(crc, 48 + (x // scale) % 10, None if p == 0 else x >= scale)
    return crc


def route_hashes(src: np.ndarray, dst: np.ndarray, channel: int) -> np.ndarray:
    """``zlib.crc32(f"{s}>{d}#{channel}".encode())`` for arrays of GPUs (the ECMP hash of
    :meth:`Cluster.path`), vectorised."""
    crc = np.full(len(src), 0xFFFFFFFF, dtype=np.uint32)
    crc = _feed_number(crc, src.astype(np.int64))
    crc = _feed(crc, ord(">"))
    crc = _feed_number(crc, dst.astype(np.int64))
    for ch in f"#{channel}":
        crc = _feed(crc, ord(ch))
    return (crc ^ np.uint32(0xFFFFFFFF)).astype(np.int64)
