"""qsub flags and #PBS directives: client scripts (dask-jobqueue, Parsl, Nextflow,
batchspawner), units, chunks, errors."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from corral.core.model.job import DependencyKind
from corral.frontends.context import SubmitContext
from corral.frontends.errors import SubmitError
from corral.frontends.pbs_options import parse_pbs_datetime, parse_qsub
from corral.submission import JobSubmission

NOW = dt.datetime(2030, 6, 15, 12, 0, 0).astimezone().timestamp()
ENV = {"HOME": "/home/bob", "PATH": "/usr/bin", "LANG": "C.UTF-8", "SECRET": "x"}


def qsub(argv: list[str], files: dict[str, str] | None = None, stdin: str | None = None,
         env: dict[str, str] | None = None) -> JobSubmission:
    return parse_qsub(argv, _ctx(files, stdin, env)).submission


def _ctx(files: dict[str, str] | None, stdin: str | None,
         env: dict[str, str] | None) -> SubmitContext:
    store = files or {}

    def read(path: str) -> str:
        if path not in store:
            raise FileNotFoundError(path)
        return store[path]

    return SubmitContext(prog="qsub", cwd="/home/bob/run", env=env or ENV, now=NOW,
                         user="bob", uid=1001, gid=1001, host="login2", read_file=read,
                         read_stdin=(lambda: stdin) if stdin is not None else None)


def qsub_error(argv: list[str], files: dict[str, str] | None = None) -> SubmitError:
    with pytest.raises(SubmitError) as exc:
        parse_qsub(argv, _ctx(files, None, None))
    return exc.value


DASK_PBS = """#!/usr/bin/env bash

#PBS -N dask-worker
#PBS -q regular
#PBS -A myproj
#PBS -l select=1:ncpus=8:mem=27GB
#PBS -l walltime=00:30:00
#PBS -e /logs/
#PBS -o /logs/
#PBS -V

/usr/bin/python -m distributed.cli.dask_worker tcp://1.2.3.4:8786 --nthreads 8
"""


def test_dask_jobqueue_pbs_script() -> None:
    sub = qsub(["/tmp/tmpx.sh"], {"/tmp/tmpx.sh": DASK_PBS})
    s = sub.spec
    assert (s.name, s.partitions, s.account) == ("dask-worker", ("regular",), "myproj")
    assert (s.nodes_min, s.nodes_max, s.ntasks, s.cpus_per_task) == (1, None, 1, 8)
    assert s.mem_per_node_mb == 27 * 1024 and s.time_limit_s == 1800
    assert sub.stdout == "/logs/%j.OU" and sub.stderr == "/logs/%j.ER"  # directories
    assert sub.env["SECRET"] == "x" and sub.extra["export"] == "ALL"  # -V
    assert sub.dialect == "pbs" and sub.workdir == "/home/bob"  # PBS jobs start in $HOME
    assert sub.env["PBS_O_WORKDIR"] == "/home/bob/run" and sub.env["PBS_O_QUEUE"] == "regular"


def test_dask_test_suite_resources_with_mb() -> None:
    script = "#!/bin/bash\n#PBS -l select=1:ncpus=2:mem=2048MB\n#PBS -l walltime=00:02:00\nx\n"
    s = qsub(["j.sh"], {"j.sh": script}).spec
    assert (s.cpus_per_task, s.mem_per_node_mb, s.time_limit_s) == (2, 2048, 120)


PARSL_PBSPRO = """#!/bin/bash

#PBS -S /bin/bash
#PBS -N parsl.pbspro.1
#PBS -m n
#PBS -l walltime=00:20:00
#PBS -l select=2:ncpus=4:mpiprocs=4
#PBS -o /run/parsl.pbspro.1.submit.stdout
#PBS -e /run/parsl.pbspro.1.submit.stderr
#PBS -l place=scatter

export JOBNAME="parsl.pbspro.1"
"""


def test_parsl_pbspro_script() -> None:
    sub = qsub(["-q", "work", "-A", "acct", "/run/x.submit"],
               {"/run/x.submit": PARSL_PBSPRO})
    s = sub.spec
    assert (s.nodes_min, s.nodes_max, s.ntasks, s.ntasks_per_node, s.cpus_per_task) == (
        2, None, 8, 4, 1)
    assert s.time_limit_s == 1200 and s.partitions == ("work",) and s.account == "acct"
    assert sub.extra["shell"] == "/bin/bash" and sub.extra["mail_points"] == "n"
    assert sub.stdout == "/run/parsl.pbspro.1.submit.stdout"
    assert "SECRET" not in sub.env and sub.extra["export"] == "NONE"


TORQUE = """#PBS -l walltime=01:00:00
#PBS -S /bin/bash
#PBS -N parsl.torque
#PBS -m n
#PBS -l nodes=2:ppn=16:ib
#PBS -o /run/t.stdout
#PBS -e /run/t.stderr
cmd
"""


def test_torque_nodes_ppn_without_shebang() -> None:
    sub = qsub(["t.sh"], {"t.sh": TORQUE})
    s = sub.spec
    assert (s.nodes_min, s.ntasks_per_node, s.ntasks, s.cpus_per_task) == (2, 16, 32, 1)
    assert s.constraint == "ib" and s.time_limit_s == 3600
    assert sub.script == TORQUE  # PBS scripts need no #! line


NEXTFLOW_PBS = """#!/bin/bash
#PBS -t 0-2
#PBS -N nf-hello
#PBS -o /work/.command.log
#PBS -j oe
#PBS -q long
#PBS -l nodes=1:ppn=4
#PBS -l walltime=02:00:00
#PBS -l mem=8gb
#PBS -P lab
NXF_CHDIR=/work
"""


def test_nextflow_torque_header() -> None:
    sub = qsub(["-N", "nf-override", ".command.run"], {".command.run": NEXTFLOW_PBS})
    s = sub.spec
    assert s.name == "nf-override"  # the command line beats the directive
    assert sub.array == "0-2" and sub.stdout == "/work/.command.log" and sub.stderr is None
    assert (s.nodes_min, s.ntasks_per_node, s.mem_per_node_mb) == (1, 4, 8192)
    assert s.account == "lab" and sub.extra["project"] == "lab"


def test_batchspawner_stdin_and_variables() -> None:
    script = ("#!/bin/sh\n#PBS -q batch@pbshost\n#PBS -l walltime=12:00:00\n"
              "#PBS -l select=1:ncpus=1:mem=4gb\n#PBS -N jupyterhub-singleuser\n"
              "#PBS -v PATH,LANG,JUPYTERHUB_API_TOKEN\njupyterhub-singleuser\n")
    env = {**ENV, "JUPYTERHUB_API_TOKEN": "tok"}
    sub = qsub([], stdin=script, env=env)
    assert sub.spec.partitions == ("batch",) and sub.spec.name == "jupyterhub-singleuser"
    assert {k: sub.env[k] for k in ("PATH", "LANG", "JUPYTERHUB_API_TOKEN")} == {
        "PATH": "/usr/bin", "LANG": "C.UTF-8", "JUPYTERHUB_API_TOKEN": "tok"}
    assert "SECRET" not in sub.env
    assert qsub([], stdin="#!/bin/sh\necho\n").spec.name == "STDIN"


@pytest.mark.parametrize(
    ("resource", "field", "value"),
    [
        ("walltime=600", "time_limit_s", 600),  # bare number: SECONDS
        ("walltime=10:00", "time_limit_s", 600),
        ("walltime=1:00:00", "time_limit_s", 3600),
        ("mem=5678", "mem_per_node_mb", 1),  # bare number: BYTES (rounded up to 1 MB)
        ("mem=1024kb", "mem_per_node_mb", 1),
        ("mem=3gb", "mem_per_node_mb", 3072),
        ("mem=2GB", "mem_per_node_mb", 2048),
        ("ncpus=6", "cpus_per_task", 6),
        ("ngpus=2", "gpus_per_node", 2),
        ("pmem=512mb", "mem_per_cpu_mb", 512),
    ],
)
def test_unit_semantics(resource: str, field: str, value: int) -> None:
    s = qsub(["-l", resource, "j.sh"], {"j.sh": "#!/bin/sh\n"}).spec
    assert getattr(s, field) == value


def test_select_chunk_placements() -> None:
    f = {"j.sh": "#!/bin/sh\n"}
    s = qsub(["-l", "select=4:ncpus=2:mem=2gb", "j.sh"], f).spec  # free placement
    assert (s.nodes_min, s.nodes_max, s.ntasks, s.cpus_per_task, s.mem_per_cpu_mb) == (
        1, 4, 4, 2, 1024)
    s = qsub(["-l", "select=2:ncpus=8:ngpus=2:mem=16gb", "-l", "place=scatter:excl",
              "j.sh"], f).spec
    assert (s.nodes_min, s.nodes_max, s.gpus_per_node, s.mem_per_node_mb, s.exclusive) == (
        2, None, 2, 16384, True)
    s = qsub(["-l", "select=2:ncpus=4:mem=1gb+1:ncpus=1:host=big1", "j.sh"], f).spec
    assert [(g.replicas, g.cpus_per_task, g.mem_per_task_mb) for g in s.task_groups] == [
        (2, 4, 1024), (1, 1, 0)]
    assert s.nodelist == ("big1",) and s.ntasks == 3
    s = qsub(["-l", "select=1:ncpus=4:avx512=True:ngpus=1:gpu_model=a100", "j.sh"], f).spec
    assert s.constraint == "avx512" and (s.gpus_per_node, s.gpu_type) == (1, "a100")


def test_join_and_output_defaults() -> None:
    f = {"run.sh": "#!/bin/sh\n"}
    sub = qsub(["run.sh"], f)
    assert sub.stdout == "/home/bob/run/%x.o%j" and sub.stderr == "/home/bob/run/%x.e%j"
    sub = qsub(["-j", "eo", "-e", "errs/e.txt", "run.sh"], f)
    assert sub.stdout == "/home/bob/run/errs/e.txt" and sub.stderr is None
    sub = qsub(["-o", "host:/abs/out.txt", "run.sh"], f)
    assert sub.stdout == "/abs/out.txt"


def test_dependency_hold_array_rerun() -> None:
    f = {"j.sh": "#!/bin/sh\n"}
    sub = qsub(["-W", "depend=afterok:12.server:13,afterany:14[].server", "-h", "-J",
                "1-10:2%3", "-r", "n", "-W", "block=true", "j.sh"], f)
    dep = sub.spec.dependency
    assert dep is not None
    assert [(d.kind, d.job_ids) for d in dep.items] == [
        (DependencyKind.AFTEROK, (12,)), (DependencyKind.AFTEROK, (13,)),
        (DependencyKind.AFTERANY, (14,))]
    assert sub.hold and sub.array == "1-10:2%3" and sub.spec.requeue is False
    assert sub.extra["pbs_W_block"] == "true"


def test_command_mode() -> None:
    sub = qsub(["-l", "ncpus=2", "--", "/bin/sleep", "10"])
    assert sub.script is None and sub.argv == ("/bin/sleep", "10")
    assert sub.spec.name == "sleep"


def test_directive_prefix() -> None:
    script = "#!/bin/sh\n#XX -N custom\n#PBS -N ignored\necho\n"
    assert qsub(["-C", "#XX", "j.sh"], {"j.sh": script}).spec.name == "custom"
    assert qsub(["-C", "", "j.sh"], {"j.sh": script}).spec.name == "j.sh"


def test_begin_time() -> None:
    f = {"j.sh": "#!/bin/sh\n"}
    t = qsub(["-a", "1300", "j.sh"], f).spec.begin_time
    assert t == NOW + 3600
    t = qsub(["-a", "1100", "j.sh"], f).spec.begin_time  # past today: tomorrow
    assert t == NOW + 23 * 3600
    assert parse_pbs_datetime("203101021530.45", NOW) == dt.datetime(
        2031, 1, 2, 15, 30, 45).astimezone().timestamp()


@pytest.mark.parametrize(
    ("argv", "first_line", "code"),
    [
        (["-Z", "j.sh"], "qsub: invalid option -- 'Z'", 2),
        (["-l"], "qsub: option requires an argument -- 'l'", 2),
        (["-l", "=oops", "j.sh"], "qsub: illegal -l value: bad resource name ''", 2),
        (["-J", "x-y", "j.sh"],
         "qsub: illegal -J value: index 'x' is not a non-negative whole number", 2),
        (["-J", "5", "j.sh"], "qsub: illegal -J value: expected X-Y[:Z][%max]", 2),
        (["-a", "25:00", "j.sh"],
         "qsub: illegal -a value: '25:00': expected [[[[CC]YY]MM]DD]hhmm[.SS]", 2),
        (["-r", "maybe", "j.sh"], "qsub: illegal -r value: 'maybe': expected y or n", 2),
        (["-J", "5-1", "j.sh"], "qsub: illegal -J value: range '5-1' runs backwards", 2),
        (["-W", "depend=afterok:bad", "j.sh"],
         "qsub: illegal -W value: bad dependency 'afterok:bad': "
         "job id 'bad' is not a positive whole number", 2),
        (["-j", "xx", "j.sh"], "qsub: illegal -j value: 'xx': expected oe, eo or n", 2),
        (["-N", "has space", "j.sh"], "qsub: illegal -N value", 2),
        (["-W", "depend=beforeok:12", "j.sh"],
         "qsub: illegal -W value: bad dependency 'beforeok:12': "
         "dependency type 'beforeok' is not supported by Corral", 2),
        (["-l", "walltime=abc", "j.sh"],
         "qsub: Illegal attribute or resource value Resource_List.walltime", 166),
        (["-l", "mem=lots", "j.sh"],
         "qsub: Illegal attribute or resource value Resource_List.mem", 166),
        (["-l", "select=2:ncpus=x", "j.sh"],
         "qsub: Illegal attribute or resource value Resource_List.select", 166),
        (["missing.sh"], "qsub: script file:: No such file or directory", 1),
        (["-I"], "qsub: interactive jobs (-I) are not supported by Corral; use srun or salloc",
         2),
    ],
)
def test_errors(argv: list[str], first_line: str, code: int) -> None:
    err = qsub_error(argv, {"j.sh": "#!/bin/sh\n"})
    assert err.message.splitlines()[0] == first_line
    assert err.exit_code == code
    if code == 2 and "illegal" in first_line or "option" in first_line:
        assert "usage: qsub" in err.message


def test_bad_directive() -> None:
    err = qsub_error(["j.sh"], {"j.sh": "#!/bin/sh\n#PBS -Y\necho\n"})
    assert err.message == "qsub: invalid option -- 'Y'\nqsub: directive error: -Y"
    assert err.exit_code == 2


def test_output_path_that_is_an_existing_directory() -> None:
    ctx = replace(_ctx({"/tmp/j.sh": "#!/bin/sh\n"}, None, None),
                  is_dir=lambda p: p == "/home/bob/run/logs")
    sub = parse_qsub(["-o", "logs", "-e", "errs", "/tmp/j.sh"], ctx).submission
    assert sub.stdout == "/home/bob/run/logs/%j.OU"
    assert sub.stderr == "/home/bob/run/errs"  # not a directory: the file itself

