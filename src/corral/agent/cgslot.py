"""Job cgroups reused by a supervisor for its successive jobs ("slots").

Why: creating and removing a job's cgroup directories (memory v1 alone has ~30 control
files, the cgroup2 tracking directory its pressure files; removal goes through cgroup
offlining) cost about 0.7 ms of CPU per job on this machine, plus kernel work after
each removal: more than the job itself for a short job. A supervisor runs one job at a
time (``zygote.py``), so it keeps its cgroup, ``<cgroup_root>/<node>/sup_<pid>``, and
resets it between jobs: the directory exists only while its supervisor lives.

Invariants, so that a job sees exactly what a fresh cgroup would give it:

- it is empty: a supervisor takes another job only when every process of the last one is
  gone, and ``reset`` checks ``cgroup.procs`` again;
- limits are the new job's: memory (v1: swap limit lifted, memory limit, then the RAM +
  swap limit when swap is constrained, in that order, as v1 demands swap >= memory at
  every step; v2: ``memory.max``, ``memory.swap.max``), CPU set (the parent's when the
  job is not pinned), pids (``max``);
- memory left charged by the last job (page cache, tmpfs files) is reclaimed
  (``memory.force_empty`` / ``memory.reclaim``); if more than ``LEFTOVER_MAX`` cannot be
  (tmpfs files the job left behind: they stay charged where they were written), the slot
  is dropped and a fresh cgroup made, so no job is charged for another's memory;
- accounting starts at zero for the job: peak memory reset (v1 ``max_usage_in_bytes``;
  v2 ``memory.peak`` reset through the descriptor it is then read from, kernel 6.12+,
  otherwise the slot is not reused), OOM kills and CPU time counted from baselines
  taken at the job's start; the freezer thawed.

Cost: the slot keeps its control files open (one descriptor per file and direction, read
with ``pread``, written with ``pwrite``: no path walk, no kernfs open per access), and a
limit is only written when the file does not show what our last write of the same value
left there (read back after writing), so a job with the limits of the last one costs a
read per file; a value changed by anyone else is seen and written again.

A supervisor killed before it could remove its slot leaves an empty directory: the next
agent start removes it (``remove_stale``), and the runner's NODE_FAIL path kills what is
in it and removes it.
"""

from __future__ import annotations

import errno
import os

from corral.agent.cgroups import (
    CgroupError,
    CgroupLayout,
    CgroupUsage,
    JobCgroup,
    _has_memsw,
    _read,
    cpulist,
    job_controllers,
    numa_nodes_of,
)
from corral.agent.proctree import is_alive

LEFTOVER_MAX = 1 << 20  # bytes a job may find charged to its cgroup from the last one
PREFIX = "sup_"


class SlotCgroup(JobCgroup):
    """A ``JobCgroup`` a supervisor process keeps for its successive jobs."""

    def __init__(self, layout: CgroupLayout, dirs: dict[str, str], rel: str) -> None:
        super().__init__(layout, dirs)
        self.rel = rel
        self.reusable = True
        self._oom0 = 0
        self._cpu0 = 0.0
        self._peak_fd = -1
        # the counters read at the end of the last job (``usage``): the next job's
        # baselines, as nothing runs in the slot in between
        self._last_raw: CgroupUsage | None = None
        self._parent_cpuset: tuple[str, str] | None = None  # v1: the parent's cpus, mems
        self._maybe_frozen = True  # thawed at the first reset, then only after a freeze
        self._fds: dict[tuple[str, int], int] = {}  # (control file, O_RDONLY/O_WRONLY) -> fd
        self._shown: dict[tuple[str, str], bytes] = {}  # (file, value written) -> read back
        self._present: dict[str, bool] = {}  # optional control files (v2 cpuset, pids)

    @classmethod
    def open(cls, layout: CgroupLayout, rel: str, *, mem_mb: int, cpus: tuple[int, ...],
             max_pids: int, memsw_mb: int = 0) -> SlotCgroup:
        cg = JobCgroup.create(layout, rel, mem_mb=mem_mb, cpus=cpus, max_pids=max_pids,
                              memsw_mb=memsw_mb)
        slot = cls(layout, cg.dirs, rel)
        slot._baselines()
        return slot

    # ---- control files, kept open ---------------------------------------------------------
    def _fd(self, path: str, mode: int) -> int:
        fd = self._fds.get((path, mode))
        if fd is None:
            fd = self._fds[(path, mode)] = os.open(path, mode | os.O_CLOEXEC)
        return fd

    def _get(self, path: str) -> str | None:
        try:
            return _pread_all(self._fd(path, os.O_RDONLY)).decode()
        except (OSError, UnicodeDecodeError):
            return None

    def _put(self, path: str, value: str) -> None:
        os.pwrite(self._fd(path, os.O_WRONLY), value.encode(), 0)

    def _is_set(self, path: str, value: str) -> bool:
        """``path`` shows what it showed right after our last write of ``value``."""
        shown = self._shown.get((path, value))
        if shown is None:
            return False
        try:
            return _pread_all(self._fd(path, os.O_RDONLY)) == shown
        except OSError:
            return False

    def _set(self, path: str, value: str) -> None:
        """Write ``value`` and remember what the file shows afterwards (``_is_set``)."""
        self._put(path, value)
        try:
            self._shown[(path, value)] = _pread_all(self._fd(path, os.O_RDONLY))
        except OSError:
            self._shown.pop((path, value), None)
        if len(self._shown) > 64:  # a few values per file in practice
            self._shown.clear()

    def _ensure(self, path: str, value: str) -> None:
        if not self._is_set(path, value):
            self._set(path, value)

    def _close_fds(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    # ---- between jobs ---------------------------------------------------------------------
    def reset(self, mem_mb: int, cpus: tuple[int, ...], max_pids: int,
              memsw_mb: int = 0) -> bool:
        """Make this the next job's cgroup. False when it cannot be (then ``discard`` it
        and open another): not empty, memory left over, or no way to reset accounting."""
        if not self.reusable or self.procs():
            return False
        try:
            if not self._reclaim():
                return False
            self._add_missing(cpus, max_pids)
            self._limits(mem_mb, cpus, max_pids, memsw_mb)
            if self._maybe_frozen:
                self.thaw()
                self._maybe_frozen = False
            self._baselines()
        except OSError:
            return False
        return self.reusable

    def _reclaim(self) -> bool:
        if "v2" in self.dirs:
            d = self.dirs["v2"]
            used = int((self._get(os.path.join(d, "memory.current")) or "0").strip() or 0)
            if used > LEFTOVER_MAX:
                try:
                    self._put(os.path.join(d, "memory.reclaim"), str(used))
                except OSError:
                    pass  # EAGAIN: could not reclaim all of it; the check below decides
                used = int((self._get(os.path.join(d, "memory.current")) or "0").strip() or 0)
            return used <= LEFTOVER_MAX
        if "memory" not in self.dirs:
            return True
        d = self.dirs["memory"]
        used = int((self._get(os.path.join(d, "memory.usage_in_bytes")) or "0").strip() or 0)
        if used > LEFTOVER_MAX:
            try:
                self._put(os.path.join(d, "memory.force_empty"), "0")
            except OSError:
                pass
            used = int((self._get(os.path.join(d, "memory.usage_in_bytes")) or "0").strip() or 0)
        return used <= LEFTOVER_MAX

    def _add_missing(self, cpus: tuple[int, ...], max_pids: int) -> None:
        if self.layout.mode != "v1":
            return
        for ctl in job_controllers(self.layout, cpus, max_pids):
            if ctl not in self.dirs:
                path = os.path.join(self.layout.v1[ctl], self.rel)
                try:
                    os.mkdir(path, 0o755)
                except FileExistsError:
                    pass
                self.dirs[ctl] = path
                self._last_raw = None  # counters of a new directory: read them afresh

    def _limits(self, mem_mb: int, cpus: tuple[int, ...], max_pids: int,
                memsw_mb: int = 0) -> None:
        limit = mem_mb * 1024 * 1024
        memsw = memsw_mb * 1024 * 1024
        mems = numa_nodes_of(cpus) if cpus else []
        if "v2" in self.dirs:
            d = self.dirs["v2"]
            self._ensure(os.path.join(d, "memory.max"), str(limit) if limit else "max")
            if self._exists(os.path.join(d, "memory.swap.max")):
                self._ensure(os.path.join(d, "memory.swap.max"),
                             str(max(memsw - limit, 0)) if memsw else "max")
            if self._exists(os.path.join(d, "cpuset.cpus")):
                self._ensure(os.path.join(d, "cpuset.cpus"), cpulist(cpus) if cpus else "")
                self._ensure(os.path.join(d, "cpuset.mems"), cpulist(mems) if mems else "")
            if self._exists(os.path.join(d, "pids.max")):
                self._ensure(os.path.join(d, "pids.max"), str(max_pids) if max_pids else "max")
            return
        if "memory" in self.dirs:
            d = self.dirs["memory"]
            mem_path = os.path.join(d, "memory.limit_in_bytes")
            mem_value = str(limit) if limit else "-1"
            if _has_memsw(d):
                sw_path = os.path.join(d, "memory.memsw.limit_in_bytes")
                sw_value = str(memsw) if memsw else "-1"
                if not (self._is_set(mem_path, mem_value) and self._is_set(sw_path, sw_value)):
                    self._set(sw_path, "-1")
                    self._set(mem_path, mem_value)
                    if memsw:
                        self._set(sw_path, sw_value)
            else:
                self._ensure(mem_path, mem_value)
        if "cpuset" in self.dirs:
            d = self.dirs["cpuset"]
            if self._parent_cpuset is None:  # read once: the node's CPUs do not change
                parent = os.path.dirname(d)
                self._parent_cpuset = (
                    (_read(os.path.join(parent, "cpuset.cpus")) or "").strip(),
                    (_read(os.path.join(parent, "cpuset.mems")) or "").strip())
            all_cpus, all_mems = self._parent_cpuset
            self._ensure(os.path.join(d, "cpuset.cpus"), cpulist(cpus) if cpus else all_cpus)
            self._ensure(os.path.join(d, "cpuset.mems"), cpulist(mems) if mems else all_mems)
        if "pids" in self.dirs:
            self._ensure(os.path.join(self.dirs["pids"], "pids.max"),
                         str(max_pids) if max_pids else "max")

    def _exists(self, path: str) -> bool:
        hit = self._present.get(path)
        if hit is None:
            hit = self._present[path] = os.path.exists(path)
        return hit

    def _baselines(self) -> None:
        """Counters as the job starts: its accounting is what they grow by."""
        raw, self._last_raw = self._last_raw, None
        if raw is None:
            raw = super().usage()
        self._oom0 = raw.oom_kills
        self._cpu0 = raw.cpu_s or 0.0
        if "v2" in self.dirs:
            if self._peak_fd < 0:
                try:
                    self._peak_fd = os.open(os.path.join(self.dirs["v2"], "memory.peak"),
                                            os.O_RDWR | os.O_CLOEXEC)
                except OSError:
                    self.reusable = False
                    return
            try:
                os.write(self._peak_fd, b"reset\n")  # kernel 6.12+: a peak for this fd
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EBADF, errno.EACCES):
                    raise
                self.reusable = False  # the peak of a later job would include this one's
        elif "memory" in self.dirs:
            self._put(os.path.join(self.dirs["memory"], "memory.max_usage_in_bytes"), "0")

    # ---- a job's view ---------------------------------------------------------------------
    def freeze(self) -> bool:
        self._maybe_frozen = True
        return super().freeze()

    def usage(self) -> CgroupUsage:
        raw = self._last_raw = super().usage()
        peak = raw.peak_bytes
        if "v2" in self.dirs and self._peak_fd >= 0:
            try:
                text = os.pread(self._peak_fd, 64, 0).decode().strip()
                peak = int(text) if text.isdigit() else peak
            except OSError:
                pass
        cpu = None if raw.cpu_s is None else max(raw.cpu_s - self._cpu0, 0.0)
        return CgroupUsage(cpu, peak, max(raw.oom_kills - self._oom0, 0))

    def remove(self, wait_s: float = 2.0) -> None:
        """Kept for the next job (``discard`` removes it)."""

    def discard(self, wait_s: float = 2.0) -> None:
        self._close_fds()
        if self._peak_fd >= 0:
            os.close(self._peak_fd)
            self._peak_fd = -1
        JobCgroup.remove(self, wait_s)


def _pread_all(fd: int) -> bytes:
    """The whole content of a control file through its open descriptor (a short read is
    the end: the kernel fills the buffer as far as the file goes)."""
    data = os.pread(fd, 65536, 0)
    if len(data) < 65536:
        return data
    chunks = [data]
    while True:
        more = os.pread(fd, 65536, sum(map(len, chunks)))
        if not more:
            return b"".join(chunks)
        chunks.append(more)


def remove_stale(layout: CgroupLayout, parent: str) -> int:
    """Remove the slots (``sup_<pid>...``) of supervisors that are gone and left them
    empty. Returns how many directories went."""
    bases = [layout.v2_root] if layout.mode == "v2" else list(layout.v1.values())
    if layout.tracking:
        bases.append(layout.tracking)
    removed = 0
    for base in bases:
        if base is None:
            continue
        node_dir = os.path.join(base, parent)
        try:
            names = os.listdir(node_dir)
        except OSError:
            continue
        for name in names:
            if not name.startswith(PREFIX):
                continue
            pid = name[len(PREFIX):].split("_", 1)[0]
            if not pid.isdigit() or is_alive(int(pid)):
                continue
            try:
                os.rmdir(os.path.join(node_dir, name))
                removed += 1
            except OSError:
                pass  # not empty: a job of a dead supervisor; the NODE_FAIL path kills it
    return removed


__all__ = ["LEFTOVER_MAX", "SlotCgroup", "CgroupError", "remove_stale"]
