"""The room a pull needs on this machine's disk (issue 33, item 4): the size and margin
arithmetic of :mod:`eps.core.room`."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eps.core.model import GB
from eps.core.room import Disk, Incoming, Room, margin_bytes, needed_bytes, room_for, size_text

MiB = 2**20


def test_a_pull_fits_when_the_margin_stays_free_after_it() -> None:
    disk = Disk(device=1, free=20 * GB, block=4096)
    assert room_for([(Incoming("/s/out", 9 * GB), disk)], margin_bytes(10)).fits
    assert room_for([(Incoming("/s/out", 10 * GB), disk)], margin_bytes(10)).fits  # exactly the margin left
    short = room_for([(Incoming("/s/out", 10 * GB + 1), disk)], margin_bytes(10))
    assert not short.fits
    assert short == Room("/s/out", 10 * GB + 1, 20 * GB, 10 * GB)


def test_a_disk_already_below_the_margin_takes_nothing_more_but_nothing_fits_with_nothing() -> None:
    low = Disk(device=1, free=5 * GB)
    assert not room_for([(Incoming("/s/out", 1), low)], margin_bytes(10)).fits
    assert room_for([(Incoming("/s/out", 0), low)], margin_bytes(0)).fits
    assert room_for([], margin_bytes(10)).fits  # nothing to write


def test_each_file_and_new_directory_may_take_one_more_block() -> None:
    # 100,000 one-byte files are 100,000 blocks on the disk, not 100 kB
    assert needed_bytes(Incoming("/o", 100_000, files=100_000, dirs=1), 4096) == 100_000 + 100_001 * 4096
    disk = Disk(device=1, free=300 * MiB, block=4096)
    many = Incoming("/o", 100_000, files=100_000)
    assert not room_for([(many, disk)], 0).fits  # 391 MiB of blocks on a 300 MiB disk
    assert room_for([(many, disk._replace(block=1))], 0).fits


def test_what_goes_to_one_filesystem_is_summed_and_other_filesystems_are_apart() -> None:
    state = Disk(device=7, free=1000 * MiB, block=1)
    elsewhere = Disk(device=8, free=1000 * MiB, block=1)
    outputs, log = Incoming("/state/outputs/d", 600 * MiB), Incoming("/state/logs", 500 * MiB)
    together = room_for([(outputs, state), (log, state)], 0)
    assert not together.fits and together.needed == 1100 * MiB and together.where == "/state/outputs/d"
    apart = room_for([(outputs, elsewhere), (log, state)], 0)
    assert apart.fits and apart.needed == 600 * MiB  # the biggest when all fit


def test_the_first_filesystem_short_of_room_is_the_one_named() -> None:
    roomy, tight = Disk(1, 10 * GB, 1), Disk(2, 100 * MiB, 1)
    got = room_for([(Incoming("/to", 1 * GB), roomy), (Incoming("/state/logs", 200 * MiB), tight)], 0)
    assert not got.fits and got.where == "/state/logs" and got.free == 100 * MiB


def test_the_line_gives_the_sizes() -> None:
    room = Room("/state/outputs/e-1", 600 * 10**6, 290 * MiB, 10 * GB)
    assert room.line() == (
        "held back for lack of disk: they need 572.2 MiB in /state/outputs/e-1, 290.0 MiB free there, "
        "and 10.0 GiB must stay free (vm_disk_margin_gb)"
    )
    data = room.as_data()
    assert data["needed_bytes"] == 600 * 10**6 and data["free_bytes"] == 290 * MiB and data["margin_bytes"] == 10 * GB
    assert data["line"] == room.line() and data["where"] == "/state/outputs/e-1"


def test_sizes_for_people() -> None:
    assert [size_text(n) for n in (0, 512, 1536, 600 * 10**6, 10 * GB, 3 * 2**40)] == [
        "0 B", "512 B", "1.5 KiB", "572.2 MiB", "10.0 GiB", "3.0 TiB"]  # fmt: skip
    assert margin_bytes(10) == 10 * 2**30 and margin_bytes(0) == 0


@given(
    sizes=st.lists(st.integers(0, 2**40), min_size=1, max_size=5),
    free=st.integers(0, 2**41),
    margin=st.integers(0, 2**36),
)
def test_fits_exactly_when_free_less_the_sum_keeps_the_margin(sizes: list[int], free: int, margin: int) -> None:
    disk = Disk(device=3, free=free, block=0)
    got = room_for([(Incoming(f"/d{i}", s), disk) for i, s in enumerate(sizes)], margin)
    assert got.needed == sum(sizes)
    assert got.fits == (free - sum(sizes) >= margin)
