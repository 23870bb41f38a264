"""Option tables of ``sbatch``, ``srun`` and ``salloc`` (Slurm 22.05 ``slurm_opt.c``).

Every option the three commands accept is listed, so a real script never fails on an
option we do not model; what Corral does not act on is recorded, not rejected (see
``slurm_options``). Short letters differ between the commands (``-u`` is ``--usage`` for
sbatch and ``--unbuffered`` for srun; ``-W`` is ``--wait`` without an argument for sbatch and
``--wait=<sec>`` for srun), hence one table per command built from one list.

Each row: key, long names, short letter per command, argument kind, commands
(``b`` sbatch, ``s`` srun, ``a`` salloc) and a one-line help used by ``corral submit --help``.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.frontends.getopt import Arg, Opt, OptionTable

R, N, OPT = Arg.REQUIRED, Arg.NONE, Arg.OPTIONAL


@dataclass(frozen=True, slots=True)
class Row:
    key: str
    long: tuple[str, ...]
    short: str | None
    arg: Arg
    cmds: str
    help: str = ""
    short_s: str | None = None  # srun's letter when it differs (None: same as short)
    short_a: str | None = None  # salloc's letter when it differs


_X = "-"  # "no short letter for this command"

ROWS: tuple[Row, ...] = (
    # --- identity, placement, accounting
    Row("job_name", ("job-name",), "J", R, "bsa", "name of the job"),
    Row("partition", ("partition",), "p", R, "bsa", "partition(s), comma separated"),
    Row("account", ("account",), "A", R, "bsa", "account to charge"),
    Row("qos", ("qos",), "q", R, "bsa", "quality of service"),
    Row("reservation", ("reservation",), None, R, "bsa", "reservation (recorded)"),
    Row("wckey", ("wckey",), None, R, "bsa", "workload characterization key (recorded)"),
    Row("comment", ("comment",), None, R, "bsa", "arbitrary comment"),
    Row("clusters", ("clusters", "cluster"), "M", R, "bsa", "cluster (accepted, one cluster)"),
    # --- size
    Row("nodes", ("nodes",), "N", R, "bsa", "node count N or range MIN-MAX"),
    Row("ntasks", ("ntasks",), "n", R, "bsa", "number of tasks"),
    Row("ntasks_per_node", ("ntasks-per-node", "tasks-per-node"), None, R, "bsa",
        "tasks per node"),
    Row("ntasks_per_core", ("ntasks-per-core",), None, R, "bsa"),
    Row("ntasks_per_socket", ("ntasks-per-socket",), None, R, "bsa"),
    Row("ntasks_per_gpu", ("ntasks-per-gpu",), None, R, "bsa"),
    Row("ntasks_per_tres", ("ntasks-per-tres",), None, R, "bsa"),
    Row("cpus_per_task", ("cpus-per-task",), "c", R, "bsa", "CPUs per task"),
    Row("mincpus", ("mincpus",), None, R, "bsa"),
    Row("mem", ("mem",), None, R, "bsa", "memory per node (MB; K/M/G/T units)"),
    Row("mem_per_cpu", ("mem-per-cpu",), None, R, "bsa", "memory per CPU"),
    Row("mem_per_gpu", ("mem-per-gpu",), None, R, "bsa", "memory per GPU"),
    Row("tmp", ("tmp",), None, R, "bsa"),
    Row("gpus", ("gpus",), "G", R, "bsa", "GPUs per job, [type:]N"),
    Row("gpus_per_node", ("gpus-per-node",), None, R, "bsa", "GPUs per node, [type:]N"),
    Row("gpus_per_task", ("gpus-per-task",), None, R, "bsa", "GPUs per task, [type:]N"),
    Row("gpus_per_socket", ("gpus-per-socket",), None, R, "bsa"),
    Row("cpus_per_gpu", ("cpus-per-gpu",), None, R, "bsa", "CPUs per GPU"),
    Row("gres", ("gres",), None, R, "bsa", "generic resources per node, e.g. gpu:a100:2"),
    Row("gres_flags", ("gres-flags",), None, R, "bsa"),
    Row("licenses", ("licenses",), "L", R, "bsa", "licenses, name[:count],..."),
    Row("sockets_per_node", ("sockets-per-node",), None, R, "bsa"),
    Row("cores_per_socket", ("cores-per-socket",), None, R, "bsa"),
    Row("threads_per_core", ("threads-per-core",), None, R, "bsa"),
    Row("extra_node_info", ("extra-node-info",), "B", R, "bsa"),
    Row("core_spec", ("core-spec",), "S", R, "bsa"),
    Row("thread_spec", ("thread-spec",), None, R, "bsa"),
    Row("hint", ("hint",), None, R, "bsa"),
    Row("distribution", ("distribution",), "m", R, "bsa"),
    Row("mem_bind", ("mem-bind", "mem_bind"), None, R, "bsa"),
    Row("cpu_freq", ("cpu-freq",), None, R, "bsa"),
    Row("gpu_bind", ("gpu-bind",), None, R, "bsa"),
    Row("gpu_freq", ("gpu-freq",), None, R, "bsa"),
    Row("overcommit", ("overcommit",), "O", N, "bsa"),
    Row("oversubscribe", ("oversubscribe",), "s", N, "bsa"),
    Row("exclusive", ("exclusive",), None, OPT, "bsa", "whole nodes for this job"),
    Row("contiguous", ("contiguous",), None, N, "bsa"),
    Row("spread_job", ("spread-job",), None, N, "bsa", "spread over as many nodes as allowed"),
    Row("use_min_nodes", ("use-min-nodes",), None, N, "bsa"),
    Row("switches", ("switches",), None, R, "bsa", "max leaf switches N[@max-wait]"),
    Row("network", ("network",), None, R, "bsa"),
    Row("power", ("power",), None, R, "bsa"),
    Row("reboot", ("reboot",), None, N, "bsa"),
    Row("delay_boot", ("delay-boot",), None, R, "bsa"),
    # --- node selection
    Row("constraint", ("constraint",), "C", R, "bsa", "node features, e.g. avx512&ib"),
    Row("prefer", ("prefer",), None, R, "bsa"),
    Row("cluster_constraint", ("cluster-constraint",), None, R, "bsa"),
    Row("nodelist", ("nodelist",), "w", R, "bsa", "required nodes (hostlist or file)"),
    Row("exclude", ("exclude",), "x", R, "bsa", "nodes to avoid (hostlist or file)"),
    Row("nodefile", ("nodefile",), "F", R, "bsa"),
    # --- time
    Row("time", ("time",), "t", R, "bsa", "time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S"),
    Row("time_min", ("time-min",), None, R, "bsa", "minimum time limit"),
    Row("begin", ("begin",), "b", R, "bsa", "start no earlier than (now+1hour, 16:00, ...)"),
    Row("deadline", ("deadline",), None, R, "bsa"),
    # --- job control
    Row("array", ("array",), "a", R, "b", "array indices, e.g. 0-15%4"),
    Row("dependency", ("dependency",), "d", R, "bsa", "afterok:ID[:ID],..."),
    Row("hold", ("hold",), "H", N, "bsa", "submit held"),
    Row("nice", ("nice",), None, OPT, "bsa", "lower priority by N (default 100)"),
    Row("priority", ("priority",), None, R, "bsa"),
    Row("requeue", ("requeue",), None, N, "b", "may be requeued"),
    Row("no_requeue", ("no-requeue",), None, N, "b", "never requeue"),
    Row("signal", ("signal",), None, R, "bsa", "[B:]SIG[@secs] before the time limit"),
    Row("kill_on_invalid_dep", ("kill-on-invalid-dep",), None, R, "b"),
    Row("no_kill", ("no-kill",), "k", OPT, "bsa"),
    Row("mail_type", ("mail-type",), None, R, "bsa", "mail events (mail_prog or [mail] SMTP)"),
    Row("mail_user", ("mail-user",), None, R, "bsa", "mail address"),
    Row("mcs_label", ("mcs-label",), None, R, "bsa"),
    Row("profile", ("profile",), None, R, "bsa"),
    Row("acctg_freq", ("acctg-freq",), None, R, "bsa"),
    Row("bb", ("bb",), None, R, "bsa"),
    Row("bbf", ("bbf",), None, R, "bsa"),
    Row("container", ("container",), None, R, "bsa", "OCI bundle directory to run the job in"),
    # --- pyxis/enroot container options (corral.frontends.container_options)
    Row("container_image", ("container-image",), None, R, "bsa",
        "image: docker://[host/]name[:tag], name[:tag], a .sif file or a directory"),
    Row("container_mounts", ("container-mounts",), None, R, "bsa",
        "bind mounts SRC[:DST[:FLAGS]],... (flags ro, rw, ... joined by +)"),
    Row("container_workdir", ("container-workdir",), None, R, "bsa",
        "working directory inside the container"),
    Row("container_env", ("container-env",), None, R, "bsa",
        "NAME,...: job variables that override the image's"),
    Row("container_name", ("container-name",), None, R, "bsa",
        "name of the container, reused by the job's steps"),
    Row("container_save", ("container-save",), None, R, "bsa"),
    Row("container_writable", ("container-writable",), None, N, "bsa",
        "writable container root (changes are discarded at the end)"),
    Row("container_readonly", ("container-readonly",), None, N, "bsa",
        "read-only container root (the default)"),
    Row("container_mount_home", ("container-mount-home",), None, N, "bsa"),
    Row("no_container_mount_home", ("no-container-mount-home",), None, N, "bsa",
        "do not mount the home directory in the container"),
    Row("container_remap_root", ("container-remap-root",), None, N, "bsa",
        "appear as root inside the container (only where the cluster allows it)"),
    Row("no_container_remap_root", ("no-container-remap-root",), None, N, "bsa"),
    Row("container_entrypoint", ("container-entrypoint",), None, N, "bsa",
        "run the image's entrypoint before the command (srun without a command: "
        "its ENTRYPOINT and CMD)"),
    Row("no_container_entrypoint", ("no-container-entrypoint",), None, N, "bsa"),
    Row("container_image_workdir", ("container-image-workdir",), None, N, "bsa",
        "start in the image's WorkingDir, not the submit directory (Corral)"),
    Row("uid", ("uid",), None, R, "bsa"),
    Row("gid", ("gid",), None, R, "bsa"),
    # --- I/O and environment
    Row("output", ("output",), "o", R, "bs", "stdout file pattern (%j %x %A %a %u %N)"),
    Row("error", ("error",), "e", R, "bs", "stderr file pattern"),
    Row("input", ("input",), "i", R, "bs", "stdin file"),
    Row("open_mode", ("open-mode",), None, R, "bs", "append or truncate"),
    Row("chdir", ("chdir",), "D", R, "bsa", "working directory of the job"),
    Row("export", ("export",), None, R, "bs", "ALL, NONE, or VAR[=value],..."),
    Row("export_file", ("export-file",), None, R, "b"),
    Row("get_user_env", ("get-user-env",), None, OPT, "ba"),
    Row("propagate", ("propagate",), None, OPT, "bs"),
    Row("wrap", ("wrap",), None, R, "b", "command to run (sbatch builds a /bin/sh script)"),
    Row("vm", ("vm",), None, OPT, "b", "run the job in a virtual machine (=IMAGE: not the "
        "default image)"),
    Row("ignore_pbs", ("ignore-pbs",), None, N, "b"),
    Row("batch", ("batch",), None, R, "b"),
    # --- command behaviour
    Row("parsable", ("parsable",), None, OPT, "b", "print only the job id"),
    Row("quiet", ("quiet",), "Q", N, "bsa", "print nothing on success"),
    Row("verbose", ("verbose",), "v", N, "bsa"),
    Row("test_only", ("test-only",), None, N, "bs", "validate only, submit nothing"),
    Row("wait", ("wait",), "W", N, "b", "wait for the job to finish"),
    Row("wait_all_nodes", ("wait-all-nodes",), None, R, "ba"),
    Row("help", ("help",), "h", N, "bsa"),
    Row("usage", ("usage",), "u", N, "bsa", short_s=_X),
    Row("version", ("version",), "V", N, "bsa"),
    # --- srun only
    Row("srun_wait", ("wait",), "W", R, "s"),
    Row("label", ("label",), "l", N, "s"),
    Row("unbuffered", ("unbuffered",), "u", N, "s"),
    Row("cpu_bind", ("cpu-bind", "cpu_bind"), None, R, "s"),
    Row("mpi", ("mpi",), None, R, "s"),
    Row("multi_prog", ("multi-prog",), None, N, "s"),
    Row("pty", ("pty",), None, N, "s"),
    Row("kill_on_bad_exit", ("kill-on-bad-exit",), "K", OPT, "s"),
    Row("preserve_env", ("preserve-env",), "E", N, "s"),
    Row("immediate", ("immediate",), "I", OPT, "sa"),
    Row("threads", ("threads",), "T", R, "s"),
    Row("disable_status", ("disable-status",), "X", N, "s"),
    Row("no_allocate", ("no-allocate",), "Z", N, "s"),
    Row("relative", ("relative",), "r", R, "s"),
    Row("overlap", ("overlap",), None, N, "s"),
    Row("exact", ("exact",), None, N, "s"),
    Row("jobid", ("jobid",), None, R, "s"),
    Row("prolog", ("prolog",), None, R, "s"),
    Row("epilog", ("epilog",), None, R, "s"),
    Row("task_prolog", ("task-prolog",), None, R, "s"),
    Row("task_epilog", ("task-epilog",), None, R, "s"),
    Row("msg_timeout", ("msg-timeout",), None, R, "s"),
    Row("accel_bind", ("accel-bind",), None, R, "s"),
    Row("bcast", ("bcast",), None, OPT, "s"),
    Row("bcast_exclude", ("bcast-exclude",), None, R, "s"),
    Row("compress", ("compress",), None, OPT, "s"),
    Row("debugger_test", ("debugger-test",), None, N, "s"),
    Row("het_group", ("het-group", "pack-group"), None, R, "s"),
    Row("interactive", ("interactive",), None, N, "s"),
    Row("quit_on_interrupt", ("quit-on-interrupt",), None, N, "s"),
    Row("resv_ports", ("resv-ports",), None, OPT, "s"),
    Row("send_libs", ("send-libs",), None, OPT, "s"),
    Row("slurmd_debug", ("slurmd-debug",), None, R, "s"),
    Row("x11", ("x11",), None, OPT, "sa"),
    # --- salloc only
    Row("bell", ("bell",), None, N, "a"),
    Row("no_bell", ("no-bell",), None, N, "a"),
    Row("no_shell", ("no-shell",), None, N, "a"),
    Row("kill_command", ("kill-command",), "K", OPT, "a"),
)


def _short_for(row: Row, cmd: str) -> str | None:
    letter = row.short
    if cmd == "s" and row.short_s is not None:
        letter = row.short_s
    if cmd == "a" and row.short_a is not None:
        letter = row.short_a
    return None if letter == _X else letter


def table_for(cmd: str, extra: tuple[Opt, ...] = ()) -> OptionTable:
    """The option table of one command: ``"b"`` sbatch, ``"s"`` srun, ``"a"`` salloc."""
    opts = [Opt(r.key, r.long, _short_for(r, cmd), r.arg) for r in ROWS if cmd in r.cmds]
    return OptionTable.of([*opts, *extra])


def help_rows(cmd: str = "b") -> list[tuple[str, str]]:
    """(spelling, help) for the documented options of a command, for ``--help`` output."""
    out: list[tuple[str, str]] = []
    for r in ROWS:
        if cmd not in r.cmds or not r.help:
            continue
        letter = _short_for(r, cmd)
        value = "" if r.arg is Arg.NONE else ("[=VALUE]" if r.arg is Arg.OPTIONAL else "=VALUE")
        spell = (f"-{letter}, " if letter else "    ") + f"--{r.long[0]}{value}"
        out.append((spell, r.help))
    return out


SBATCH_TABLE = table_for("b")
SRUN_TABLE = table_for("s")
SALLOC_TABLE = table_for("a")
