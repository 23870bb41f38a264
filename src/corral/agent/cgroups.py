"""Per-job cgroups: detect the host's layout, create a job cgroup, account, kill, remove.

(The directory name below is ``job_<id>``; supervisors that run job after job keep one
per supervisor instead, ``sup_<pid>``, reset between jobs: ``cgslot.py``.)

Layouts (``detect_layout`` reads /proc/self/mounts):

- **v2**: a cgroup2 mount whose ``cgroup.controllers`` offers ``memory``. The job cgroup is
  ``<mount>/<cgroup_root>/job_<id>`` with ``memory.max``, ``memory.swap.max`` (when swap is
  constrained),
  ``cpuset.cpus``/``cpuset.mems``, ``pids.max``; accounting from ``cpu.stat``
  (``usage_usec``), ``memory.peak`` (kernel 5.19+) and ``memory.events`` (``oom_kill``);
  ``cgroup.kill`` (5.14+) ends the whole tree. The parents get the controllers enabled in
  ``cgroup.subtree_control`` (they hold no processes: the "no internal processes" rule).
- **v1** (hybrid hosts such as this one): one hierarchy per controller. The job gets a
  directory in ``memory`` (``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes`` when
  swap is constrained,
  ``max_usage_in_bytes``, the ``oom_kill`` counter of ``memory.oom_control`` — ``failcnt``
  stays 0 on these kernels), in ``cpuset`` when it is pinned to CPUs (cpus + mems, both
  required before attaching; parents get their parent's values copied), in ``pids`` when
  it has a pids limit. A controller-less cgroup2 mounted beside them
  (``/sys/fs/cgroup/unified``) tracks the whole process tree: its core files give
  ``cgroup.procs``, ``cgroup.kill`` (5.14+), ``cgroup.freeze`` (5.2+) and CPU time
  (``cpu.stat`` ``usage_usec``), so ``cpuacct`` and ``freezer`` directories are made only
  where that tracking cgroup lacks them (``CgroupLayout.tracking_full``). Each cgroup
  directory costs a mkdir, an attach and an rmdir per job (about 0.1 ms of CPU each here):
  a job gets only the ones that enforce or measure something.
- **none**: no cgroup filesystem, or nothing writable (not root, no delegation). The
  caller falls back to rlimits and CPU affinity (``isolation.py``).

A process is attached by writing its pid to ``cgroup.procs`` of every job directory,
before it execs (the job child does it for itself), so nothing it forks escapes.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass, field

from corral.agent.proctree import forget_dirs, open_in_dir, read_in_dir

V1_CONTROLLERS = ("memory", "cpuset", "cpuacct", "pids", "freezer", "devices")
V2_CONTROLLERS = ("memory", "cpuset", "cpu", "pids")


class CgroupError(Exception):
    pass


@dataclass(frozen=True)
class CgroupLayout:
    mode: str  # "v2" | "v1" | "none"
    v2_root: str | None = None  # cgroup2 mount with controllers (mode v2)
    v1: dict[str, str] = field(default_factory=dict)  # controller -> mount point (mode v1)
    tracking: str | None = None  # controller-less cgroup2 mount (hybrid): tracking + kill
    reason: str = ""  # why "none", or what is missing
    # the tracking cgroup2 has cgroup.kill, cgroup.freeze and cpu.stat: no v1 freezer or
    # cpuacct directory is needed for a job
    tracking_full: bool = False

    def describe(self) -> str:
        if self.mode == "v2":
            return f"cgroup v2 at {self.v2_root}"
        if self.mode == "v1":
            extra = f", tracking in cgroup2 {self.tracking}" if self.tracking else ""
            return f"cgroup v1 ({', '.join(sorted(self.v1))}){extra}"
        return f"no cgroups ({self.reason})"


@dataclass(frozen=True)
class CgroupUsage:
    cpu_s: float | None
    peak_bytes: int | None
    oom_kills: int


def _read(path: str) -> str | None:
    try:
        return read_in_dir(path, recheck=True).decode()
    except (OSError, UnicodeDecodeError):
        return None


def _write(path: str, value: str) -> None:
    fd = open_in_dir(path, os.O_WRONLY | os.O_CLOEXEC, recheck=True)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _kv(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return None


_memsw: dict[str, bool] = {}


def _has_memsw(job_dir: str) -> bool:
    """Swap accounting is on (``memory.memsw.*`` exist); asked once per parent directory."""
    parent = os.path.dirname(job_dir)
    hit = _memsw.get(parent)
    if hit is None:
        hit = _memsw[parent] = os.path.exists(os.path.join(job_dir, "memory.memsw.limit_in_bytes"))
    return hit


def cpulist(cpus: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 5) -> "0-2,5" (the kernel's list format)."""
    out: list[str] = []
    ids = sorted(set(cpus))
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def parse_cpulist(text: str) -> list[int]:
    """"0-2,5" -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def detect_layout(mounts_text: str | None = None) -> CgroupLayout:
    """Find the cgroup filesystems from /proc/self/mounts (or the given text)."""
    if mounts_text is None:
        mounts_text = _read("/proc/self/mounts") or ""
    v1: dict[str, str] = {}
    v2: list[str] = []
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mnt, fstype, opts = parts[1], parts[2], parts[3].split(",")
        if fstype == "cgroup2":
            v2.append(mnt)
        elif fstype == "cgroup":
            for ctl in V1_CONTROLLERS:
                if ctl in opts and ctl not in v1:
                    v1[ctl] = mnt
    for mnt in v2:
        ctls = (_read(os.path.join(mnt, "cgroup.controllers")) or "").split()
        if "memory" in ctls:
            return CgroupLayout("v2", v2_root=mnt)
    tracking = v2[0] if v2 else None
    if v1:
        return CgroupLayout("v1", v1=v1, tracking=tracking)
    return CgroupLayout("none", reason="no cgroup filesystem with a memory controller is mounted")


def _mkdir_levels(base: str, rel: str, v1_cpuset: bool = False,
                  v2_enable: tuple[str, ...] = ()) -> str:
    """Create ``base/rel`` level by level, preparing each level for children."""
    path = base
    if v2_enable:
        _enable_controllers(path, v2_enable)
    for part in [p for p in rel.split("/") if p]:
        parent, path = path, os.path.join(path, part)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass
        if v1_cpuset:
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not (_read(os.path.join(path, name)) or "").strip():
                    inherited = (_read(os.path.join(parent, name)) or "").strip()
                    _write(os.path.join(path, name), inherited)
        if v2_enable:
            _enable_controllers(path, v2_enable)
    return path


def _enable_controllers(path: str, wanted: tuple[str, ...]) -> None:
    available = set((_read(os.path.join(path, "cgroup.controllers")) or "").split())
    enabled = set((_read(os.path.join(path, "cgroup.subtree_control")) or "").split())
    missing = [c for c in wanted if c in available and c not in enabled]
    if missing:
        _write(os.path.join(path, "cgroup.subtree_control"), " ".join(f"+{c}" for c in missing))


def prepare(layout: CgroupLayout, cgroup_root: str) -> CgroupLayout:
    """Create the parent cgroups under which job cgroups go; mode "none" if not writable."""
    if layout.mode == "none":
        return layout
    try:
        if layout.mode == "v2":
            assert layout.v2_root is not None
            _mkdir_levels(layout.v2_root, cgroup_root, v2_enable=V2_CONTROLLERS)
        else:
            for ctl, mnt in layout.v1.items():
                _mkdir_levels(mnt, cgroup_root, v1_cpuset=(ctl == "cpuset"))
    except OSError as exc:
        return CgroupLayout("none", reason=f"cannot create {cgroup_root} cgroups: {exc}")
    tracking = layout.tracking
    full = False
    if tracking is not None:
        try:
            base = _mkdir_levels(tracking, cgroup_root)
        except OSError:
            tracking = None
        else:
            full = all(os.path.exists(os.path.join(base, name))
                       for name in ("cgroup.kill", "cgroup.freeze", "cpu.stat"))
    return CgroupLayout(layout.mode, layout.v2_root, dict(layout.v1), tracking, layout.reason,
                        tracking_full=full)


def job_controllers(layout: CgroupLayout, cpus: tuple[int, ...], max_pids: int,
                    devices: bool = False) -> list[str]:
    """The v1 hierarchies a job gets a directory in (see the module docstring); ``devices``
    only for a job with device files to hide."""
    out = []
    for ctl in layout.v1:
        if ctl == "devices" and not devices:
            continue
        if ctl == "cpuset" and not cpus:
            continue
        if ctl == "pids" and not max_pids:
            continue
        if ctl in ("cpuacct", "freezer") and layout.tracking_full:
            continue
        out.append(ctl)
    return out


_numa_cache: dict[tuple[int, ...], list[int]] = {}


def numa_nodes_of(cpus: tuple[int, ...], sys_root: str = "/sys") -> list[int]:
    """NUMA nodes holding any of ``cpus`` (from /sys/devices/system/node; the host's
    answers are remembered per CPU set: the topology does not change while we run)."""
    if sys_root == "/sys":
        key = tuple(cpus)
        hit = _numa_cache.get(key)
        if hit is None:
            if len(_numa_cache) > 1024:
                _numa_cache.clear()
            hit = _numa_cache[key] = _numa_nodes(cpus, sys_root)
        return list(hit)
    return _numa_nodes(cpus, sys_root)


def _numa_nodes(cpus: tuple[int, ...], sys_root: str) -> list[int]:
    base = os.path.join(sys_root, "devices/system/node")
    out: list[int] = []
    try:
        names = os.listdir(base)
    except OSError:
        return out
    want = set(cpus)
    for name in names:
        if name.startswith("node") and name[4:].isdigit():
            text = _read(os.path.join(base, name, "cpulist")) or ""
            if want & set(parse_cpulist(text)):
                out.append(int(name[4:]))
    return sorted(out)


class JobCgroup:
    """The cgroup directories of one job (one per v1 controller, or one v2 directory)."""

    def __init__(self, layout: CgroupLayout, dirs: dict[str, str]) -> None:
        self.layout = layout
        self.dirs = dirs  # controller (or "v2" / "tracking") -> directory

    # the control-file access of a job's own directories (``cgslot`` keeps them open)
    def _get(self, path: str) -> str | None:
        return _read(path)

    def _put(self, path: str, value: str) -> None:
        _write(path, value)

    @classmethod
    def create(cls, layout: CgroupLayout, rel: str, *, mem_mb: int = 0,
               cpus: tuple[int, ...] = (), max_pids: int = 0,
               memsw_mb: int = 0, deny_devices: tuple[str, ...] = ()) -> JobCgroup:
        """``mem_mb``: the RAM limit, ``memsw_mb`` the RAM + swap limit (0: none; see
        ``launch.memory_limits_mb``); ``deny_devices``: device files the job's processes
        may not open (``corral.agent.devices``)."""
        if layout.mode == "none":
            raise CgroupError(layout.reason)
        dirs: dict[str, str] = {}
        if layout.mode == "v2":
            assert layout.v2_root is not None
            dirs["v2"] = os.path.join(layout.v2_root, rel)
        else:
            for ctl in job_controllers(layout, cpus, max_pids, bool(deny_devices)):
                dirs[ctl] = os.path.join(layout.v1[ctl], rel)
            if layout.tracking:
                dirs["tracking"] = os.path.join(layout.tracking, rel)
        cg = cls(layout, dirs)
        try:
            cg._make(mem_mb, cpus, max_pids, memsw_mb)
            if deny_devices:
                from corral.agent.devices import deny

                deny(cg.dirs, deny_devices)
        except OSError as exc:
            cg.remove(wait_s=0.0)
            raise CgroupError(f"cannot set up cgroup {rel}: {exc}") from exc
        return cg

    def _make(self, mem_mb: int, cpus: tuple[int, ...], max_pids: int,
              memsw_mb: int = 0) -> None:
        for path in self.dirs.values():
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                if (_read(os.path.join(path, "cgroup.procs")) or "").strip():
                    raise OSError(errno.EBUSY, f"{path} exists and still has processes") from None
        limit = mem_mb * 1024 * 1024
        memsw = memsw_mb * 1024 * 1024
        mems = numa_nodes_of(cpus) if cpus else []
        if "v2" in self.dirs:
            d = self.dirs["v2"]
            if limit:
                _write(os.path.join(d, "memory.max"), str(limit))
            if memsw and os.path.exists(os.path.join(d, "memory.swap.max")):
                _write(os.path.join(d, "memory.swap.max"), str(max(memsw - limit, 0)))
            if cpus and os.path.exists(os.path.join(d, "cpuset.cpus")):
                _write(os.path.join(d, "cpuset.cpus"), cpulist(cpus))
                if mems:
                    _write(os.path.join(d, "cpuset.mems"), cpulist(mems))
            if max_pids and os.path.exists(os.path.join(d, "pids.max")):
                _write(os.path.join(d, "pids.max"), str(max_pids))
            return
        if "memory" in self.dirs and limit:
            d = self.dirs["memory"]
            _write(os.path.join(d, "memory.limit_in_bytes"), str(limit))
            if memsw and _has_memsw(d):
                _write(os.path.join(d, "memory.memsw.limit_in_bytes"), str(memsw))
        if "cpuset" in self.dirs:
            d = self.dirs["cpuset"]
            parent = os.path.dirname(d)
            all_cpus = (_read(os.path.join(parent, "cpuset.cpus")) or "").strip()
            all_mems = (_read(os.path.join(parent, "cpuset.mems")) or "").strip()
            _write(os.path.join(d, "cpuset.cpus"), cpulist(cpus) if cpus else all_cpus)
            _write(os.path.join(d, "cpuset.mems"), cpulist(mems) if mems else all_mems)
        if "pids" in self.dirs and max_pids:
            _write(os.path.join(self.dirs["pids"], "pids.max"), str(max_pids))

    @property
    def controllers(self) -> set[str]:
        if "v2" in self.dirs:
            ctls = (self._get(os.path.join(self.dirs["v2"], "cgroup.controllers")) or "").split()
            return set(ctls)
        return {c for c in self.dirs if c != "tracking"}

    def attach(self, pid: int) -> None:
        for path in self.dirs.values():
            self._put(os.path.join(path, "cgroup.procs"), str(pid))

    def procs(self) -> set[int]:
        """Every process of the job: every directory holds all of them (they are attached
        together and children inherit), so one tree-wide directory suffices."""
        out: set[int] = set()
        one = self.dirs.get("v2") or self.dirs.get("tracking")
        for path in [one] if one else self.dirs.values():
            text = self._get(os.path.join(path, "cgroup.procs")) or ""
            out.update(int(x) for x in text.split())
        return out

    def _killer(self) -> str | None:
        for key in ("v2", "tracking"):
            path = self.dirs.get(key)
            if path and os.path.exists(os.path.join(path, "cgroup.kill")):
                return os.path.join(path, "cgroup.kill")
        return None

    def kill_all(self) -> None:
        """SIGKILL every process in the job's cgroups."""
        killer = self._killer()
        if killer is not None:
            try:
                self._put(killer, "1")
                return
            except OSError:
                pass
        frozen = self.freeze()
        for pid in self.procs():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if frozen:
            self.thaw()

    def _freezer(self) -> tuple[str, str, str] | None:
        """(file, freeze value, thaw value) of the job's freezer, if it has one."""
        if "v2" in self.dirs:
            return os.path.join(self.dirs["v2"], "cgroup.freeze"), "1", "0"
        if "freezer" in self.dirs:
            return os.path.join(self.dirs["freezer"], "freezer.state"), "FROZEN", "THAWED"
        if "tracking" in self.dirs and self.layout.tracking_full:
            return os.path.join(self.dirs["tracking"], "cgroup.freeze"), "1", "0"
        return None

    def freeze(self) -> bool:
        how = self._freezer()
        if how is None:
            return False
        path, value, _thaw = how
        try:
            self._put(path, value)
            return True
        except OSError:
            return False

    def thaw(self) -> None:
        how = self._freezer()
        if how is not None:
            self._put(how[0], how[2])

    def usage(self) -> CgroupUsage:
        if "v2" in self.dirs:
            d = self.dirs["v2"]
            usec = _kv(self._get(os.path.join(d, "cpu.stat")), "usage_usec")
            peak_text = self._get(os.path.join(d, "memory.peak"))
            oom = _kv(self._get(os.path.join(d, "memory.events")), "oom_kill") or 0
            peak_v2 = int(peak_text) if peak_text and peak_text.strip().isdigit() else None
            return CgroupUsage(None if usec is None else usec / 1e6, peak_v2, oom)
        cpu_s: float | None = None
        peak: int | None = None
        oom = 0
        if "cpuacct" in self.dirs:
            ns = self._get(os.path.join(self.dirs["cpuacct"], "cpuacct.usage"))
            cpu_s = int(ns) / 1e9 if ns and ns.strip().isdigit() else None
        elif "tracking" in self.dirs:
            usec = _kv(self._get(os.path.join(self.dirs["tracking"], "cpu.stat")), "usage_usec")
            cpu_s = None if usec is None else usec / 1e6
        if "memory" in self.dirs:
            d = self.dirs["memory"]
            text = self._get(os.path.join(d, "memory.max_usage_in_bytes"))
            peak = int(text) if text and text.strip().isdigit() else None
            oom = _kv(self._get(os.path.join(d, "memory.oom_control")), "oom_kill") or 0
        return CgroupUsage(cpu_s, peak, oom)

    def populated(self) -> bool:
        return bool(self.procs())

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the job's directories (they must be empty; waits up to ``wait_s``)."""
        deadline = time.monotonic() + wait_s
        pending = list(self.dirs.values())
        while pending:
            left: list[str] = []
            for path in pending:
                forget_dirs(path)
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise
                    left.append(path)
            if not left:
                return
            if time.monotonic() >= deadline:
                raise CgroupError(f"cgroups still busy: {', '.join(left)}")
            pending = left
            time.sleep(0.01)

    def describe(self) -> dict[str, object]:
        return {"mode": self.layout.mode, "dirs": dict(self.dirs),
                "tracking_full": self.layout.tracking_full}

    @classmethod
    def from_describe(cls, data: dict[str, object]) -> JobCgroup:
        dirs = data.get("dirs")
        mode = str(data.get("mode", "none"))
        layout = CgroupLayout(mode, tracking_full=bool(data.get("tracking_full")))
        return cls(layout, dict(dirs) if isinstance(dirs, dict) else {})
