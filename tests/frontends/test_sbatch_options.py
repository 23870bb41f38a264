"""sbatch option parsing: Slurm's captured error cases, real client scripts, semantics."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from corral.core.model.job import DependencyKind
from corral.frontends.context import SubmitContext
from corral.frontends.errors import SubmitError
from corral.frontends.slurm_options import SbatchRequest, parse_sbatch
from corral.submission import JobSubmission

DATA = Path(__file__).parent / "data" / "slurm-22.05"
NOW = 1_790_000_000.0  # a fixed "now" for --begin


def reader(files: dict[str, str]) -> Callable[[str], str]:
    def read(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]
    return read


def ctx(files: dict[str, str] | None = None, stdin: str | None = None,
        env: dict[str, str] | None = None, **kw: object) -> SubmitContext:
    values: dict[str, object] = {
        "prog": "sbatch", "cwd": "/home/alice/work", "env": env or {"PATH": "/usr/bin"},
        "now": NOW, "user": "alice", "uid": 1000, "gid": 1000, "host": "login1",
        "read_file": reader(files or {}),
        "read_stdin": (lambda: stdin) if stdin is not None else None,
    }
    values.update(kw)
    return SubmitContext(**values)  # type: ignore[arg-type]


def sbatch(argv: list[str], **kw: object) -> JobSubmission:
    return parse_sbatch(argv, ctx(**kw)).submission  # type: ignore[arg-type]


def request(argv: list[str], **kw: object) -> SbatchRequest:
    return parse_sbatch(argv, ctx(**kw))  # type: ignore[arg-type]


def error(argv: list[str], **kw: object) -> SubmitError:
    with pytest.raises(SubmitError) as exc:
        parse_sbatch(argv, ctx(**kw))  # type: ignore[arg-type]
    return exc.value


# ---- every sbatch error case captured from Slurm 22.05 ----------------------------------

# Cases only the controller can decide (partition names, node sizes): the parser accepts
# them and the server answers with the message in the file.
SERVER_SIDE = {"err_sbatch_invalid_partition.txt", "err_sbatch_too_much_memory.txt"}


def _captured(path: Path) -> tuple[str, str, int]:
    lines = path.read_text().splitlines()
    command = lines[0].removeprefix("$ ")
    code = int(lines[-1].removeprefix("[exit code: ").rstrip("]"))
    return command, "\n".join(lines[1:-1]), code


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("err_sbatch_*.txt")))
def test_captured_slurm_errors(name: str) -> None:
    command, output, code = _captured(DATA / name)
    files: dict[str, str] = {}
    stdin = None
    if "printf 'echo no shebang\\n' > noshebang.sh;" in command:
        files["noshebang.sh"] = "echo no shebang\n"
        command = command.split(";", 1)[1]
    if command.endswith("< /dev/null"):
        stdin = ""
        command = command.removesuffix("< /dev/null")
    argv = shlex.split(command)[1:]
    c = ctx(files, stdin=stdin, max_array_size=4001)
    if name in SERVER_SIDE:
        parse_sbatch(argv, c)  # accepted here; refused by the controller
        return
    if code == 0:
        assert output.startswith("Submitted batch job")
        parse_sbatch(argv, c)
        return
    with pytest.raises(SubmitError) as exc:
        parse_sbatch(argv, c)
    assert exc.value.message == output
    assert exc.value.exit_code == code


@pytest.mark.parametrize(
    ("argv", "message", "code"),
    [
        (["--mem=12Q", "--wrap=x"], "sbatch: error: Invalid --mem specification", 255),
        (["--mem-per-cpu=x", "--wrap=x"], "sbatch: error: Invalid --mem-per-cpu specification",
         255),
        (["--time-min=x", "--wrap=x"], "sbatch: error: Invalid --time-min specification", 255),
        (["--begin=yesterdayish", "--wrap=x"], "sbatch: error: Invalid --begin specification",
         255),
        (["-N", "abc", "--wrap=x"], 'sbatch: error: "abc" is not a valid node count', 255),
        (["-N", "4-2", "--wrap=x"],
         "sbatch: error: Maximum node count 2 is less than minimum node count 4", 255),
        (["-n", "x", "--wrap=x"], 'sbatch: error: Invalid numeric value "x" for --ntasks.', 1),
        (["-c", "0", "--wrap=x"],
         'sbatch: error: Invalid numeric value "0" for --cpus-per-task.', 1),
        (["--signal=FOO@10", "--wrap=x"], "sbatch: error: Invalid --signal specification", 255),
        (["--open-mode=x", "--wrap=x"], "sbatch: error: Invalid --open-mode specification", 255),
        (["--exclusive=bogus", "--wrap=x"], "sbatch: error: Invalid --exclusive specification",
         255),
        (["--nice=99999999999", "--wrap=x"],
         "sbatch: error: Invalid --nice value, out of range (+/- 2147483645)", 255),
        (["--mail-type=SOMETIMES", "--wrap=x"], "sbatch: error: Invalid --mail-type specification",
         255),
        (["--gres=gpu:a:b:c:d", "--wrap=x"], "sbatch: error: Batch job submission failed: "
         "Invalid generic resource (gres) specification", 1),
        (["--gpus=a100:x", "--wrap=x"], "sbatch: error: Batch job submission failed: "
         "Invalid generic resource (gres) specification", 1),
        (["-C", "a&&b", "--wrap=x"],
         "sbatch: error: Batch job submission failed: Invalid feature specification", 1),
        (["-L", "matlab:0", "--wrap=x"],
         "sbatch: error: Batch job submission failed: Invalid license specification", 1),
        (["-w", "node[1-", "--wrap=x"],
         "sbatch: error: Batch job submission failed: Invalid node name specified", 1),
        (["--uid=0", "--wrap=x"], "sbatch: error: --uid only permitted by root user", 255),
        (["--wrap=x", "script.sh"],
         "sbatch: error: script arguments not permitted with --wrap option", 1),
        (["--mem=1G", "--mem-per-cpu=1G", "--wrap=x"],
         "sbatch: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.", 1),
        (["-t"], "sbatch: option requires an argument -- 't'\n"
         'Try "sbatch --help" for more information', 255),
    ],
)
def test_bad_values(argv: list[str], message: str, code: int) -> None:
    err = error(argv)
    assert (err.message, err.exit_code) == (message, code)


def test_bad_directive_in_script() -> None:
    files = {"j.sh": "#!/bin/sh\n#SBATCH --bogus-opt\necho\n"}
    err = error(["j.sh"], files=files)
    assert err.message == (
        "sbatch: unrecognized option '--bogus-opt'\n"
        "sbatch: error: Invalid directive found in batch script: --bogus-opt"
    )
    assert err.exit_code == 255
    err = error(["j.sh"], files={"j.sh": "#!/bin/sh\n#SBATCH -J x stray\necho\n"})
    assert err.message == "sbatch: error: Invalid directive found in batch script: stray"
    err = error(["j.sh"], files={"j.sh": "#!/bin/sh\n#SBATCH -t abc\necho\n"})
    assert err.message == "sbatch: error: Invalid --time specification"


def test_script_checks() -> None:
    assert error(["j.sh"], files={"j.sh": "#!/bin/sh\r\necho\r\n"}).message.startswith(
        "sbatch: error: Batch script contains DOS line breaks")
    assert error(["j.sh"], files={"j.sh": "   \n"}).message == (
        "sbatch: error: Batch script contains only whitespace!")
    assert error([]).message == "sbatch: error: Batch script is empty!"  # no stdin at all


# ---- scripts written by real clients ---------------------------------------------------

SUBMITIT = """#!/bin/bash

# Parameters
#SBATCH --array=0-4%3
#SBATCH --cpus-per-task=2
#SBATCH --error=/tmp/sub/%A_%a_0_log.err
#SBATCH --gpus-per-node=1
#SBATCH --job-name=submitit
#SBATCH --mem=64GB
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --open-mode=append
#SBATCH --output=/tmp/sub/%A_%a_0_log.out
#SBATCH --partition=learnfair
#SBATCH --signal=USR2@90
#SBATCH --time=5
#SBATCH --wckey=submitit
#SBATCH --exclusive
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=a@b.c

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /tmp/sub/%A_%a_%t_log.out python -u -m submitit.core._submit /tmp
"""


def test_submitit_script() -> None:
    sub = sbatch(["/tmp/sub/.submission_file_x.sh"],
                 files={"/tmp/sub/.submission_file_x.sh": SUBMITIT})
    s = sub.spec
    assert s.name == "submitit" and s.partitions == ("learnfair",)
    assert (s.nodes_min, s.nodes_max, s.ntasks_per_node, s.cpus_per_task) == (1, None, 2, 2)
    assert s.mem_per_node_mb == 64 * 1024 and s.gpus_per_node == 1
    assert s.time_limit_s == 300 and s.exclusive
    assert sub.array == "0-4%3" and sub.open_mode == "append" and sub.signal == "USR2@90"
    assert sub.stdout == "/tmp/sub/%A_%a_0_log.out" and sub.stderr == "/tmp/sub/%A_%a_0_log.err"
    assert sub.extra["wckey"] == "submitit" and sub.extra["mail_type"] == "END,FAIL"
    assert sub.extra["script_path"] == "/tmp/sub/.submission_file_x.sh"
    assert sub.script == SUBMITIT  # captured at submit time


DASK = """#!/usr/bin/env bash

#SBATCH -J dask-worker
#SBATCH -e /logs/dask-worker-%J.err
#SBATCH -o /logs/dask-worker-%J.out
#SBATCH -p normal
#SBATCH -A myacct
#SBATCH -n 1
#SBATCH -N 1
#SBATCH --cpus-per-task=2
#SBATCH --mem=2G
#SBATCH -t 00:02:00
#SBATCH --qos=high

/usr/bin/python3 -m distributed.cli.dask_worker tcp://10.0.0.1:8786 --name dummy-name
"""


def test_dask_jobqueue_script() -> None:
    sub = sbatch(["/tmp/tmpabc.sh"], files={"/tmp/tmpabc.sh": DASK})
    s = sub.spec
    assert (s.name, s.partitions, s.account, s.qos) == ("dask-worker", ("normal",), "myacct",
                                                        "high")
    assert (s.ntasks, s.nodes_min, s.nodes_max, s.cpus_per_task) == (1, 1, None, 2)
    assert (s.mem_per_node_mb, s.time_limit_s) == (2048, 120)
    assert sub.stdout == "/logs/dask-worker-%J.out"


PARSL = """#!/bin/bash

#SBATCH --job-name=parsl.slurm.1700000000.5
#SBATCH --output=/runinfo/submit_scripts/parsl.slurm.17.submit.stdout
#SBATCH --error=/runinfo/submit_scripts/parsl.slurm.17.submit.stderr
#SBATCH --nodes=2
#SBATCH --time=10
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --mem=4g
#SBATCH --cpus-per-task=8

export JOBNAME="parsl.slurm.1700000000.5"
srun --ntasks 2 -l bash cmd_$SLURM_JOB_NAME.sh
"""


def test_parsl_script() -> None:
    s = sbatch(["p.submit"], files={"p.submit": PARSL}).spec
    assert (s.nodes_min, s.nodes_max, s.ntasks_per_node, s.cpus_per_task) == (2, None, 1, 8)
    assert s.time_limit_s == 600 and s.exclusive and s.mem_per_node_mb == 4096


NEXTFLOW = """#!/bin/bash
#SBATCH --array 0-2
#SBATCH -J nf-hello_(1)
#SBATCH -o "/data/some\\ data/work/.command.log"
#SBATCH --no-requeue
#SBATCH --signal B:USR2@30
#SBATCH -c 2
#SBATCH -t 51:00:00
#SBATCH --mem 1024M
#SBATCH -p long
#SBATCH -a 1 --signal=KILL
#SBATCH -A proj
NXF_CHDIR=/data/work
"""


def test_nextflow_script_with_options_sharing_a_line() -> None:
    sub = sbatch([".command.run"], files={".command.run": NEXTFLOW})
    s = sub.spec
    assert s.name == "nf-hello_(1)" and s.account == "proj" and s.partitions == ("long",)
    assert sub.stdout == "/data/some data/work/.command.log"
    assert s.requeue is False and s.cpus_per_task == 2
    assert s.time_limit_s == 51 * 3600 and s.mem_per_node_mb == 1024
    assert sub.array == "1"  # the later "-a 1" wins over "--array 0-2"
    assert sub.signal == "KILL@60"  # and the later --signal=KILL (default 60 s)


def test_snakemake_command_line_and_wrap() -> None:
    argv = shlex.split(
        "--parsable --job-name 1b2c --output /logs/rule_a/%j.log --export=ALL "
        "--comment rule_a_wildcards -A lab -p batch -t 90 -C '' --qos='' --mem 4000 "
        "--ntasks=1 --cpus-per-task=4 -D /wf --requeue "
        "--wrap=\"python -m snakemake --target-jobs 'a:' \\\"x\\\"\""
    )
    req = request(argv)
    sub, opts = req.submission, req.options
    assert opts.parsable
    s = sub.spec
    assert (s.name, s.account, s.partitions, s.comment) == ("1b2c", "lab", ("batch",),
                                                            "rule_a_wildcards")
    assert s.constraint is None and s.qos is None  # -C '' and --qos='' mean none
    assert s.time_limit_s == 90 * 60 and s.mem_per_node_mb == 4000 and s.cpus_per_task == 4
    assert sub.workdir == "/wf" and sub.extra["submit_dir"] == "/home/alice/work"
    assert sub.script is not None and sub.script.startswith(
        "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n")
    assert sub.script.endswith("python -m snakemake --target-jobs 'a:' \"x\"\n")
    assert s.requeue is True


def test_snakemake_script_on_stdin() -> None:
    sub = sbatch(["--parsable", "-t", "5", "/dev/stdin"],
                 files={"/dev/stdin": "#!/bin/sh\nsnakemake --rule a\n"})
    assert sub.spec.name == "sbatch" and sub.script == "#!/bin/sh\nsnakemake --rule a\n"
    sub = sbatch(["--parsable"], stdin="#!/bin/sh\n#SBATCH -J fromstdin\necho\n")
    assert sub.spec.name == "fromstdin"


BATCHSPAWNER = """#!/bin/bash
#SBATCH --output=/home/alice/jupyterhub_slurmspawner_%j.log
#SBATCH --job-name=spawner-jupyterhub
#SBATCH --chdir=/home/alice
#SBATCH --export=PATH,LANG,JUPYTERHUB_API_TOKEN,JPY_API_TOKEN
#SBATCH --get-user-env=L
#SBATCH --gres=gpu:1
#SBATCH --time=3-05:10:10

set -euo pipefail
trap 'echo SIGTERM received' TERM
srun batchspawner-singleuser jupyterhub-singleuser
"""


def test_batchspawner_export_list() -> None:
    env = {"PATH": "/usr/bin", "LANG": "C", "JUPYTERHUB_API_TOKEN": "t", "SECRET": "s"}
    sub = sbatch(["--parsable"], stdin=BATCHSPAWNER, env=env)
    assert sub.env == {"PATH": "/usr/bin", "LANG": "C", "JUPYTERHUB_API_TOKEN": "t"}
    assert sub.extra["export"] == "LIST" and sub.extra["get_user_env"] == "L"
    assert sub.spec.gpus_per_node == 1 and sub.workdir == "/home/alice"
    assert sub.spec.time_limit_s == 3 * 86400 + 5 * 3600 + 10 * 60 + 60  # seconds round up


RAY = """#!/bin/bash
#SBATCH --job-name=test
#SBATCH --cpus-per-task=5
#SBATCH --mem-per-cpu=1GB
#SBATCH --nodes=4
#SBATCH --tasks-per-node=1
#SBATCH --gpus-per-task=1
#SBATCH --time=00:30:00
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
"""


def test_ray_script() -> None:
    s = sbatch(["ray.sh"], files={"ray.sh": RAY}).spec
    assert (s.nodes_min, s.ntasks_per_node, s.cpus_per_task, s.mem_per_cpu_mb) == (4, 1, 5, 1024)
    assert s.gpus_per_task == 1 and s.time_limit_s == 1800


# ---- semantics -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "nodes", "ntasks", "per_node"),
    [
        ([], (1, None), None, None),
        (["-n", "4"], (1, 4), 4, None),  # tasks may spread
        (["-n", "1"], (1, None), 1, None),
        (["-n", "8", "--ntasks-per-node=4"], (2, None), 8, 4),
        (["-n", "9", "--ntasks-per-node=4"], (3, None), 9, 4),
        (["-N", "2-4", "-n", "8"], (2, 4), 8, None),
        (["-N2"], (2, None), None, None),
        (["-N", "1k"], (1024, None), None, None),
    ],
)
def test_node_and_task_counts(argv: list[str], nodes: tuple[int, int | None],
                              ntasks: int | None, per_node: int | None) -> None:
    s = sbatch([*argv, "--wrap=true"]).spec
    assert (s.nodes_min, s.nodes_max) == nodes
    assert (s.ntasks, s.ntasks_per_node) == (ntasks, per_node)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("5", 300), ("5:30", 360), ("1:00:00", 3600), ("2-0", 172800), ("2-3:04", 183840),
        ("2-03:04:05", 183900), ("0", None), ("UNLIMITED", None), ("infinite", None),
    ],
)
def test_time_formats(value: str, seconds: int | None) -> None:
    sub = sbatch(["-t", value, "--wrap=true"])
    assert sub.spec.time_limit_s == seconds
    assert (sub.extra.get("time_limit") == "UNLIMITED") == (seconds is None)


@pytest.mark.parametrize(
    ("flag", "value", "field", "mb"),
    [
        ("--mem", "4000", "mem_per_node_mb", 4000),
        ("--mem", "27G", "mem_per_node_mb", 27 * 1024),
        ("--mem", "64GB", "mem_per_node_mb", 64 * 1024),
        ("--mem", "1K", "mem_per_node_mb", 1),
        ("--mem", "2T", "mem_per_node_mb", 2 * 1024 * 1024),
        ("--mem", "0", "mem_per_node_mb", 0),  # all the node's memory
        ("--mem-per-cpu", "1536MB", "mem_per_cpu_mb", 1536),
    ],
)
def test_memory(flag: str, value: str, field: str, mb: int) -> None:
    s = sbatch([f"{flag}={value}", "--wrap=true"]).spec
    assert getattr(s, field) == mb


def test_memory_options_replace_each_other() -> None:
    files = {"j.sh": "#!/bin/sh\n#SBATCH --mem-per-cpu=100\n#SBATCH --mem=2G\necho\n"}
    s = sbatch(["j.sh"], files=files).spec
    assert (s.mem_per_node_mb, s.mem_per_cpu_mb) == (2048, None)  # later directive wins
    s = sbatch(["--mem-per-cpu=300", "j.sh"], files=files).spec
    assert (s.mem_per_node_mb, s.mem_per_cpu_mb) == (None, 300)  # the command line wins


def test_gpus() -> None:
    s = sbatch(["--gpus=a100:2", "--wrap=x"]).spec
    assert (s.gpus, s.gpu_type, s.gpus_per_node) == (2, "a100", 0)
    s = sbatch(["--gres=gpu:v100:4,nvme:1", "--wrap=x"]).spec
    assert (s.gpus_per_node, s.gpu_type, s.gres) == (4, "v100", (("nvme", 1),))
    s = sbatch(["--gpus-per-node=2", "--mem-per-gpu=10G", "--cpus-per-gpu=3", "--wrap=x"]).spec
    assert (s.gpus_per_node, s.mem_per_node_mb, s.cpus_per_task) == (2, 20480, 6)
    s = sbatch(["--gpus-per-task=1", "-n", "2", "--cpus-per-gpu=4", "--wrap=x"]).spec
    assert (s.gpus_per_task, s.cpus_per_task) == (1, 4)
    err = error(["--gpus=a100:1", "--gpus-per-node=v100:1", "--wrap=x"])
    assert err.message.endswith("Invalid generic resource (gres) specification")


def test_dependency_and_array() -> None:
    sub = sbatch(["-d", "afterok:12:13,afterany:14_2", "--array=1-10:2%3", "--wrap=x"])
    dep = sub.spec.dependency
    assert dep is not None and not dep.any_of
    assert [(d.kind, d.job_ids) for d in dep.items] == [
        (DependencyKind.AFTEROK, (12,)), (DependencyKind.AFTEROK, (13,)),
        (DependencyKind.AFTERANY, (14,))]
    assert sub.array == "1-10:2%3"
    err = error(["--array=1-5000", "--wrap=x"], max_array_size=4001)
    assert err.message.endswith("Invalid job array specification")
    assert sbatch(["--array=1-5000", "--wrap=x"]).array == "1-5000"  # no limit known here


def test_begin_times() -> None:
    assert sbatch(["--begin=now+60", "--wrap=x"]).spec.begin_time == NOW + 60
    assert sbatch(["--begin=now+1hour", "--wrap=x"]).spec.begin_time == NOW + 3600
    assert sbatch(["-b", "now+2days", "--wrap=x"]).spec.begin_time == NOW + 2 * 86400
    t = sbatch(["--begin=16:00", "--wrap=x"]).spec.begin_time
    assert t is not None and NOW < t <= NOW + 86400
    iso = sbatch(["--begin=2030-01-02T03:04:05", "--wrap=x"]).spec.begin_time
    import datetime as dt
    assert iso == dt.datetime(2030, 1, 2, 3, 4, 5).astimezone().timestamp()
    assert sbatch(["--begin=tomorrow", "--wrap=x"]).spec.begin_time == pytest.approx(
        (dt.datetime.fromtimestamp(NOW).replace(hour=0, minute=0, second=0, microsecond=0)
         + dt.timedelta(days=1)).timestamp())


def test_export_modes() -> None:
    env = {"PATH": "/bin", "HOME": "/h", "X": "1"}
    assert sbatch(["--wrap=x"], env=env).env == env
    assert sbatch(["--export=NONE", "--wrap=x"], env=env).env == {}
    assert sbatch(["--export=ALL,Y=2", "--wrap=x"], env=env).env == {**env, "Y": "2"}
    assert sbatch(["--export=X,Z=3,MISSING", "--wrap=x"], env=env).env == {"X": "1", "Z": "3"}


def test_misc_options() -> None:
    sub = sbatch(shlex.split(
        "-H --nice --switches=2@10:00 -L matlab:2,ansys --spread-job -w node[01-03] "
        "-x node7 -C 'avx512&(ib|roce)' -q normal --comment hi -i in.txt -e none "
        "--reservation=r1 --hint=nomultithread --wrap=x"))
    s = sub.spec
    assert sub.hold and s.nice == 100 and (s.switches, s.switches_wait_s) == (2, 600)
    assert s.licenses == (("ansys", 1), ("matlab", 2)) and s.spread
    assert s.nodelist == ("node01", "node02", "node03") and s.exclude == ("node7",)
    assert s.constraint == "avx512&(ib|roce)" and s.qos == "normal" and s.comment == "hi"
    assert sub.stdin == "in.txt" and sub.stderr == "/dev/null"
    assert sub.extra["reservation"] == "r1" and sub.extra["hint"] == "nomultithread"


def test_nodelist_from_file() -> None:
    files = {"/tmp/hosts": "n1\nn2 n3\n"}
    assert sbatch(["-w", "/tmp/hosts", "--wrap=x"], files=files).spec.nodelist == (
        "n1", "n2", "n3")


def test_precedence_cli_over_env_over_script() -> None:
    files = {"j.sh": "#!/bin/sh\n#SBATCH -p script -J s -t 10\necho\n"}
    env = {"SBATCH_PARTITION": "env", "SBATCH_TIMELIMIT": "20"}
    s = sbatch(["j.sh"], files=files, env=env).spec
    assert (s.partitions, s.name, s.time_limit_s) == (("env",), "s", 1200)
    s = sbatch(["-p", "cli", "j.sh"], files=files, env=env).spec
    assert (s.partitions, s.time_limit_s) == (("cli",), 1200)


def test_partition_list_and_defaults() -> None:
    sub = sbatch(["-p", "a,b", "job.sh", "x", "--y"],
                 files={"job.sh": "#!/bin/bash\necho $1\n"})
    assert sub.spec.partitions == ("a", "b")
    assert sub.spec.name == "job.sh" and sub.argv == ("x", "--y")
    assert (sub.spec.user, sub.spec.uid) == ("alice", 1000) and sub.dialect == "slurm"
    assert sub.stdout is None and sub.stderr is None  # the agent applies slurm-%j.out
    assert sub.extra["submit_host"] == "login1"


def test_help_is_reported_without_reading_a_script() -> None:
    req = request(["--help", "/no/such/file"])
    assert req.options.help


def test_srun_table_through_the_same_builder() -> None:
    from corral.frontends.slurm_options import (
        SlurmOptions,
        apply_options,
        build_submission,
        parse_slurm_args,
    )

    c = ctx(prog="srun")
    parsed, command = parse_slurm_args(
        ["--mpi=none", "-vv", "-n", "4", "-l", "--cpu-bind=q", "python", "x.py", "-n", "1"], c)
    opts = SlurmOptions()
    apply_options(opts, parsed, c, "cli")
    sub = build_submission(opts, c, script=None, argv=command, default_name="python",
                           interactive=True)
    assert sub.argv == ("python", "x.py", "-n", "1") and sub.interactive
    assert sub.spec.ntasks == 4 and opts.verbose == 2
    assert opts.extra["label"] == "set" and opts.extra["mpi"] == "none"
    with pytest.raises(SubmitError) as exc:
        parse_slurm_args(["--bogus"], c)
    assert exc.value.message.endswith('Try "srun --help" for more information')
    err = c.rejected("Requested node configuration is not available")
    assert err.message == ("srun: error: Unable to allocate resources: Requested node "
                           "configuration is not available")
