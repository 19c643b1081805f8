"""Reading entries of a memory-mapped array with pread: the same entries as the mapping, no page held."""

from __future__ import annotations

import numpy as np
import pytest

from gnnscale.graph.pages import read_entries, unmapped_reads


@pytest.mark.parametrize("offset_entries", [0, 17, 4096 + 3])
def test_pread_reads_the_same_entries_as_the_mapping(tmp_path, offset_entries):
    np.arange(20_000, dtype="<i8").tofile(tmp_path / "a.bin")
    mapped = np.memmap(tmp_path / "a.bin", dtype="<i8", mode="r", offset=8 * offset_entries,
                       shape=(20_000 - offset_entries,))
    buf = np.empty(300, dtype=np.int64)
    with unmapped_reads(mapped) as (fd, at):
        assert fd >= 0 and at == 8 * offset_entries
        for start in (0, 5, mapped.shape[0] - 300):
            assert read_entries(fd, at, mapped, start, start + 300, buf)
            np.testing.assert_array_equal(buf, mapped[start:start + 300])
        # Past the end of the file: refused, not zeros.
        assert not read_entries(fd, at, mapped, mapped.shape[0] - 10, mapped.shape[0] + 10, np.empty(20, np.int64))


def test_an_array_in_memory_is_read_from_memory():
    array = np.arange(100, dtype=np.int64)
    buf = np.empty(10, dtype=np.int64)
    with unmapped_reads(array) as (fd, at):
        assert (fd, at) == (-1, 0)
        assert read_entries(fd, at, array, 40, 50, buf)
    np.testing.assert_array_equal(buf, np.arange(40, 50))
