"""How much memory this process can still take: free memory, and its control group's limit.

A capture that cannot fit is refused in one line before the work that would not fit starts,
rather than left to the kernel's out-of-memory killer (a signal, and no word of why).
"""

from __future__ import annotations

from pathlib import Path

# A control group without a limit reports this many bytes or more (cgroup v1's
# memory.limit_in_bytes is PAGE_COUNTER_MAX pages when unset; v2 says "max").
_UNLIMITED_BYTES = 1 << 60


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, ValueError):
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 <= value < _UNLIMITED_BYTES else None


def _stat_value(path: Path, key: str) -> int:
    """One counter of a memory.stat file (0 when absent or unreadable)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _meminfo_available(meminfo: Path) -> int | None:
    """The kernel's estimate of memory that can be had without swapping (MemAvailable)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _group_room(group: Path, v2: bool) -> int | None:
    """What a memory control group's limit leaves: its limit less what it uses, where the
    page cache it can drop to make room (file pages: a capture read through mmap, files
    written) counts as room, as the kernel's MemAvailable counts it."""
    stat = group / "memory.stat"
    if v2:
        limit, used = _read_int(group / "memory.max"), _read_int(group / "memory.current")
        reclaimable = _stat_value(stat, "active_file") + _stat_value(stat, "inactive_file")
    else:
        limit = _read_int(group / "memory.limit_in_bytes")
        used = _read_int(group / "memory.usage_in_bytes")
        reclaimable = _stat_value(stat, "total_active_file") + _stat_value(
            stat, "total_inactive_file"
        )
    if limit is None or used is None:
        return None
    return max(limit - used + reclaimable, 0)


def _groups(self_cgroup: Path, root: Path) -> list[tuple[Path, bool]]:
    """This process's memory control group and each one above it, innermost first, with
    whether it is cgroup v2 (a limit anywhere up the tree binds)."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return []
    found: list[tuple[Path, bool]] = []
    for line in lines:
        hierarchy, controllers, rel = [*line.split(":", 2), "", ""][:3]
        if hierarchy == "0" and controllers == "":
            base, v2 = root / "unified", True
            if not base.is_dir() or not (base / "cgroup.controllers").exists():
                base = root
        elif "memory" in controllers.split(","):
            base, v2 = root / "memory", False
        else:
            continue
        parts = [p for p in rel.split("/") if p not in ("", ".", "..")]
        for depth in range(len(parts), -1, -1):
            found.append((base.joinpath(*parts[:depth]), v2))
    return found


def available_bytes(
    meminfo: Path = Path("/proc/meminfo"),
    self_cgroup: Path = Path("/proc/self/cgroup"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
) -> int | None:
    """The memory this process can still take: the least of the machine's available memory
    and the room every memory control group it is in leaves. None where none can be read."""
    room = [_meminfo_available(meminfo)]
    room += [_group_room(group, v2) for group, v2 in _groups(self_cgroup, cgroup_root)]
    known = [r for r in room if r is not None]
    return min(known) if known else None
