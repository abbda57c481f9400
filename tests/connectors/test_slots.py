from __future__ import annotations

from connectors.slots import human_bytes


def test_slot_sizes_read_as_people_read_them() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1536, 5 * 1024**2, 3 * 1024**3 + 1024**3 // 2, 2048 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 MiB",
        "3.5 GiB",
        "2048.0 GiB",
    ]
