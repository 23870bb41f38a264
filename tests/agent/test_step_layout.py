"""Pure parts of multi-node steps: task layout, CPU and GPU binding, the launch spec and
the I/O frames (``corral.protocol.step``, ``corral.agent.cpubind``, ``corral.agent.stepd``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.agent import cpubind
from corral.agent.stepd import gpus_of_task, task_environment
from corral.protocol import step as sp


def test_block_cyclic_and_plane_layouts() -> None:
    assert sp.task_layout(3, 2) == [[0, 1], [2]]
    assert sp.task_layout(4, 2, "block") == [[0, 1], [2, 3]]
    assert sp.task_layout(3, 2, "cyclic") == [[0, 2], [1]]
    assert sp.task_layout(6, 2, "plane=2") == [[0, 1, 4, 5], [2, 3]]
    assert sp.task_layout(2, 4) == [[0], [1]]  # never more nodes than tasks
    assert sp.task_layout(4, 2, "block", caps=[1, 3]) == [[0], [1, 2, 3]]
    with pytest.raises(ValueError, match="do not fit"):
        sp.task_layout(5, 2, "block", caps=[2, 2])
    with pytest.raises(ValueError, match="unknown distribution"):
        sp.task_layout(2, 2, "bogus")


@given(st.integers(1, 40), st.integers(1, 8), st.sampled_from(["block", "cyclic", "plane=3"]),
       st.data())
def test_layout_places_every_task_once_within_caps(ntasks: int, nnodes: int, dist: str,
                                                   data: st.DataObject) -> None:
    caps = data.draw(st.none() | st.lists(st.integers(1, 12), min_size=nnodes,
                                          max_size=nnodes))
    try:
        layout = sp.task_layout(ntasks, nnodes, dist, caps)
    except ValueError:
        assert caps is not None and sum(caps[:min(nnodes, ntasks)]) < ntasks
        return
    assert sorted(t for node in layout for t in node) == list(range(ntasks))
    assert len(layout) == min(nnodes, ntasks)
    if dist != "plane=3":
        assert all(node for node in layout)  # every step node gets a task
    if caps is not None:
        assert all(len(node) <= cap for node, cap in zip(layout, caps, strict=False))


def test_cpu_binding_types() -> None:
    cores = [(0, 4), (1, 5), (2, 6), (3, 7)]  # 4 cores x 2 threads
    assert cpubind.bind_task("cores", cores, 1, 4, 1).cpus == (1, 5)
    assert cpubind.bind_task("threads", cores, 1, 4, 1).cpus == (4,)
    assert cpubind.bind_task("threads", cores, 1, 2, 2).cpus == (1, 5)
    assert cpubind.bind_task("map_cpu:6,2", cores, 1, 2, 1).cpus == (2,)
    assert cpubind.bind_task("mask_cpu:0x3,0xC", cores, 1, 2, 1).cpus == (2, 3)
    none = cpubind.bind_task("none", cores, 0, 2, 1)
    assert none.cpus == () and none.env["SLURM_CPU_BIND_TYPE"] == "none,"
    default = cpubind.bind_task("", cores, 2, 4, 1)
    assert default.cpus == (2, 6) and default.env["SLURM_CPU_BIND_TYPE"] == "cores,"
    # more tasks than cores: no binding by default rather than sharing cores badly
    assert cpubind.bind_task("", cores, 0, 8, 1).cpus == ()
    # a map naming a CPU the job does not hold binds nothing (never outside the job)
    assert cpubind.bind_task("map_cpu:9", cores, 0, 1, 1).cpus == ()
    v = cpubind.bind_task("verbose,cores", cores, 0, 1, 1)
    assert v.env["SLURM_CPU_BIND"] == "verbose,cores" and v.env["SLURM_CPU_BIND_LIST"] == "0x11"
    with pytest.raises(cpubind.CpuBindError, match="invalid --cpu-bind type"):
        cpubind.check("bogus")
    with pytest.raises(cpubind.CpuBindError, match="bad CPU id"):
        cpubind.check("map_cpu:x")
    assert cpubind.cores_of((0, 1, 4), [(0, 4), (1, 5)]) == [(0, 4), (1,)]


def _launch(**kw: object) -> sp.StepLaunch:
    base: dict[str, object] = {
        "job_id": 5, "restarts": 0, "step_id": 2, "argv": ["true"], "cwd": "/tmp",
        "env": {"PATH": "/bin"}, "ntasks": 3, "nodes": ["a", "b"], "tasks": [[0, 1], [2]],
        "io_addr": "10.0.0.1:4000", "io_key": "k"}
    base.update(kw)
    return sp.StepLaunch.from_json(base)


def test_gpus_per_task_and_gpu_bind() -> None:
    assert gpus_of_task(_launch(gpus_per_task=1), "4,5", 1) == "5"
    assert gpus_of_task(_launch(gpus_per_task=2), "4,5,6,7", 1) == "6,7"
    assert gpus_of_task(_launch(gpus_per_task=1, gpu_bind="none"), "4,5", 1) is None
    assert gpus_of_task(_launch(gpu_bind="map_gpu:5,4"), "4,5", 0) == "5"
    assert gpus_of_task(_launch(gpu_bind="map_gpu:9"), "4,5", 0) is None  # not the job's
    assert gpus_of_task(_launch(), "4,5", 0) is None
    assert gpus_of_task(_launch(gpu_bind="mask_gpu:0x30,0x10"), "4,5", 0) == "4,5"
    assert gpus_of_task(_launch(gpu_bind="mask_gpu:0x30,0x10"), "4,5", 1) == "4"
    assert gpus_of_task(_launch(gpu_bind="mask_gpu:0x3"), "4,5", 0) is None  # not the job's


def test_task_environment_has_slurm_step_variables() -> None:
    launch = _launch(env={"SLURMD_NODENAME": "a", "CUDA_VISIBLE_DEVICES": "0", "X": "1"},
                     task_env={"2": {"PMI_RANK": "2"}})
    env = task_environment(launch, {"SLURMD_NODENAME": "b", "SLURM_JOB_ID": "5"}, 1, 2, 0,
                           "10.0.0.1")
    assert env["SLURMD_NODENAME"] == "b" and env["X"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in env  # srun's node had GPUs; this node gives none
    assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NODEID"]) == ("2", "0", "1")
    assert env["SLURM_STEP_ID"] == "2" and env["SLURM_STEP_NODELIST"] == "a,b"
    assert env["SLURM_STEP_TASKS_PER_NODE"] == "2,1" and env["SLURM_GTIDS"] == "2"
    assert env["SLURM_SRUN_COMM_HOST"] == "10.0.0.1" and env["PMI_RANK"] == "2"


@pytest.mark.parametrize(("change", "field"), [
    ({"tasks": [[0, 1], [1]]}, "tasks must number"),
    ({"tasks": [[0, 1, 2]]}, "one list of task ids per node"),
    ({"argv": []}, "argv must not be empty"),
    ({"argv": [], "container": '{"image": "docker://r.example/x:1"}'},
     "argv must not be empty"),  # only a step that runs its image's ENTRYPOINT and CMD
    ({"env": {"A": 1}}, "env must map strings"),
    ({"ntasks": -1}, "ntasks must be a non-negative"),
    ({"output": 5}, "output must be a string"),
    ({"task_env": {"0": {"A": 2}}}, "task_env"),
    ({"task_prolog": "rel/path"}, "task_prolog must be an absolute path"),
    ({"task_epilog": 3}, "task_epilog must be a string"),
])
def test_launch_validation_names_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        _launch(**change)


def test_a_container_step_with_entrypoint_may_give_no_command() -> None:
    spec = '{"image": "docker://r.example/x:1", "entrypoint": true}'
    assert _launch(argv=[], container=spec).argv == []


def test_frames_round_trip_in_pieces() -> None:
    data = sp.pack(sp.STDOUT, 3, b"hello\n") + sp.pack(sp.EXIT, 3, b'{"exit_code":0}')
    reader = sp.FrameReader()
    got = []
    for i in range(len(data)):  # one byte at a time
        got += reader.feed(data[i:i + 1])
    assert got == [(sp.STDOUT, 3, b"hello\n"), (sp.EXIT, 3, b'{"exit_code":0}')]
    with pytest.raises(ValueError, match="exceeds"):
        sp.FrameReader().feed(sp.HEADER.pack(sp.STDOUT, 0, sp.MAX_PAYLOAD + 1))


def test_srun_refuses_or_warns_about_what_it_does_not_apply() -> None:
    import time

    from corral.shims.context import Context
    from corral.shims.srun import StepShapeError, check_gpu_bind, parse, step_warnings

    def warnings(*argv: str) -> list[str]:
        ctx = Context(argv=[*argv, "true"], env={}, cwd="/tmp", prog="srun", uid=0,
                      now=time.time())
        return step_warnings(parse(ctx, "srun")[1])

    assert any("--exclusive is not enforced" in w for w in warnings("--exclusive"))
    assert any("--exact is not enforced" in w for w in warnings("--exact"))
    assert any("only the distribution over nodes" in w for w in warnings("-m", "block:cyclic"))
    assert warnings("--overlap") == [] and warnings("-m", "cyclic:block") == []
    assert warnings("--task-prolog=/x", "--task-epilog=/y") == []  # they run (stepd)
    for ok in ("", "none", "per_task:2", "map_gpu:0,1", "verbose,map_gpu:1", "mask_gpu:0x3",
               "mask_gpu:0x3,c"):
        check_gpu_bind(ok)
    for bad in ("closest", "single:1", "mask_gpu:0xg", "mask_gpu:", "per_task:x"):
        with pytest.raises(StepShapeError, match="is not supported"):
            check_gpu_bind(bad)
    with pytest.raises(ValueError, match="arbitrary"):
        sp.task_layout(2, 2, "arbitrary")
