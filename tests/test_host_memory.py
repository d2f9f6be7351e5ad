"""`release_freed_memory` gives a fragmented heap's free pages back to the OS (what keeps CPU training bounded)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import os
    from webrl.host_memory import release_freed_memory

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    big, pins = [], []
    for _ in range(2000):
        big.append(bytearray(b"x") * 100_000)  # 200 MB in chunks under glibc's mmap threshold: on the heap
        pins.append(bytearray(b"x") * 100)  # small live chunks between them keep the heap from shrinking
    before = rss()
    del big
    freed = rss()
    released = release_freed_memory()
    print(before, freed, rss(), released)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's (Linux)")
def test_freed_heap_pages_return_to_the_os_only_when_released():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    before, freed, after, released = int(out[0]), int(out[1]), int(out[2]), out[3]
    assert released == "True"
    assert before > 190e6, "the probe's 200 MB were not resident"
    # Measured here: 214 MB resident, 125 MB after the free (glibc keeps the holes), 14 MB after the release.
    assert freed - after > 80e6, f"resident {freed / 1e6:.0f} MB after freeing, {after / 1e6:.0f} MB after release"
