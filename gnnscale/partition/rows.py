"""Rows of the symmetric adjacency that partitioners read (METIS' CSR, KaMinPar's ParHIP file).

Both builders stage, for each node, its in-neighbors then its out-neighbors in one buffer (row ``i``
from ``starts[i]`` to ``starts[i + 1]``), then call the two kernels below: each row sorted and
deduplicated in place, then every row moved left so the rows lie end to end. Sharing them keeps the
two partitioners reading the same graph.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(parallel=True, cache=True)
def dedupe_rows(staged, starts, first_node):
    """Sort each row in place and keep its first ``degree[i]`` entries: its distinct neighbors other than
    node ``first_node + i`` itself. Returns int64 [rows] ``degree``."""
    k = starts.shape[0] - 1
    degree = np.empty(k, dtype=np.int64)
    for i in numba.prange(k):
        row = staged[starts[i]:starts[i + 1]]
        row.sort()
        m = 0
        for j in range(row.shape[0]):
            u = row[j]
            if u != first_node + i and (m == 0 or row[m - 1] != u):
                row[m] = u
                m += 1
        degree[i] = m
    return degree


@numba.njit(cache=True)
def compact_rows(staged, starts, degree):
    """Move the kept prefix of every row left so the rows lie end to end; returns their total length.

    Sequential and in place: a row's new start is never after its old one, so it never overwrites an
    unread row.
    """
    t = 0
    for i in range(degree.shape[0]):
        s = starts[i]
        for j in range(degree[i]):
            staged[t + j] = staged[s + j]
        t += degree[i]
    return t
