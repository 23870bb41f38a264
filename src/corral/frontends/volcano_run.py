"""The batch program of a Volcano job: one host process per replica, Volcano's policies.

Run as the job's batch script (``python -m corral.frontends.volcano_run`` with the plan
of ``corral.frontends.volcano.parse_job`` on stdin) on the job's first node. Algorithm:

1. The replicas' nodes come from ``CORRAL_VC_LAYOUT`` (the controller's allocation,
   ``task=node:count,node:count;...``): replica ``i`` of a task runs on the i-th slot.
   Replicas the gang started without (``minAvailable`` below the replicas) are not run.
   Tasks start in the plan's order: a task after the tasks it ``dependsOn``.
   A replica of a task with a NUMA policy (``topologyPolicy`` ``restricted`` or
   ``single-numa-node``) is pinned to its own CPUs, which ``CORRAL_VC_CPUS`` lists slot
   by slot (``task=0,1,2|4,5,6;...``): on this node through its CPU affinity (the CPUs
   it may use here, if any of its own are among them), on another through ``srun
   --cpu-bind=mask_cpu:``; its memory comes from those CPUs' NUMA nodes (here
   ``set_mempolicy`` before its exec, elsewhere ``srun --mem-bind=local``); with GPUs
   it sees only its own (``CORRAL_VC_GPUS``, slot by slot): ``CUDA_VISIBLE_DEVICES``
   here, ``srun --gpu-bind=mask_gpu:`` elsewhere.
2. Each replica is a process with its container's ``command + args`` and ``env``, plus the
   ``env`` plugin's ``VC_TASK_INDEX``/``VK_TASK_INDEX`` and the ``svc`` plugin's
   ``VC_<TASK>_HOSTS``/``VC_<TASK>_NUM`` and host files (``<task>.host``, one host name a
   line, in ``$VC_HOSTFILE_DIR``: host processes share ``/etc``, so not ``/etc/volcano``).
   Replicas on this node are started directly; others through ``srun -w NODE``. A task
   with an image to run in (``run_image``: ``[controller] volcano_images = "container"``)
   has every replica, this node's too, started through ``srun -w NODE
   --container-image=IMG`` (the node's agent pulls and starts it as any container step;
   its hostPath mounts as ``--container-mounts``, the replica's variables winning over
   the image's through ``--container-env``; Kubernetes' rule for what runs: a task
   without ``command`` gets ``--container-entrypoint`` and its ``args`` (none: the image's
   ENTRYPOINT + CMD, which the node reads from the image), one without ``workingDir``
   ``--container-image-workdir``).
   Output goes to ``<submit dir>/.corral/vcjob-<id>/<pod>.log`` (``kubectl logs``).
3. Each replica is recorded as a job step named after its pod (``<job>-<task>-<i>``), so
   the controller reports pod phases, and ``sacct``/``squeue -s`` show them.
4. When a replica ends, the first matching policy (task policies, then the job's; events
   ``PodFailed``/``PodEvicted`` for a non-zero exit, ``exitCode``, ``TaskCompleted`` when
   all of a task's replicas succeeded) acts: ``RestartPod``/``RestartTask``/``RestartJob``
   (counted against ``maxRetry``; beyond it the job fails), ``AbortJob``, ``TerminateJob``,
   ``CompleteJob``. With no matching policy nothing happens.
5. When ``minSuccess`` replicas have succeeded the others are stopped and the job is
   done (exit 0). When every replica has ended: exit 0 (phase ``Completed``) when at least
   ``minSuccess`` (default: the job's ``minAvailable``) succeeded, else 1 (``Failed``);
   ``AbortJob`` exits 2 (``Aborted``), ``TerminateJob`` 3 (``Terminated``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from corral.frontends.volcano import EXIT_ABORTED, EXIT_FAILED, EXIT_TERMINATED

SSH_SHIM = r"""#!/bin/sh
# ssh for the replicas of a Volcano job (the ssh plugin): ssh [options] HOST COMMAND...
# runs COMMAND on HOST (a node of this job, or a replica's pod name) as a job step
while [ $# -gt 0 ]; do
  case "$1" in
    -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "ssh: usage: ssh [options] host command" >&2; exit 255; }
host=${1#*@}
shift
[ $# -gt 0 ] || { echo "ssh: Corral's ssh plugin runs commands only (no login shell)" >&2
                  exit 255; }
node=$(awk -v h="$host" '$1 == h { print $2; exit }' @PODS@)
exec @SRUN@ --overlap -N1 -n1 -w "${node:-$host}" /bin/sh -c "$*"
"""


def parse_layout(text: str) -> dict[str, list[str]]:
    """``CORRAL_VC_LAYOUT`` -> each task's replica slots (node names, in order)."""
    out: dict[str, list[str]] = {}
    for part in text.split(";"):
        if "=" not in part:
            continue
        task, _, rest = part.partition("=")
        slots = out.setdefault(task, [])
        for item in rest.split(","):
            node, _, n = item.rpartition(":")
            if node and n.isdigit():
                slots.extend([node] * int(n))
    return out


def parse_cpus(text: str) -> dict[str, list[tuple[int, ...]]]:
    """``CORRAL_VC_CPUS`` (or ``CORRAL_VC_GPUS``) -> each aligned task's replica CPUs
    (GPUs), slot by slot (``()``: not known)."""
    out: dict[str, list[tuple[int, ...]]] = {}
    for part in text.split(";"):
        task, eq, rest = part.partition("=")
        if not eq:
            continue
        out[task] = [tuple(int(c) for c in slot.split(",") if c.strip().isdigit())
                     for slot in rest.split("|")]
    return out


def pin_set(cpus: tuple[int, ...]) -> set[int]:
    """The CPUs a replica is pinned to: its own among those this job may use here (none:
    not pinned, e.g. a node configured larger than the host)."""
    if not cpus or not hasattr(os, "sched_getaffinity"):
        return set()
    return set(cpus) & os.sched_getaffinity(0)


def log_dir(submit_dir: str, job_id: str) -> Path:
    return Path(submit_dir) / ".corral" / f"vcjob-{job_id}"


def pod_name(job: str, task: str, index: int) -> str:
    return f"{job}-{task}-{index}"


def env_name(task: str) -> str:
    return task.upper().replace("-", "_").replace(".", "_")


class Replica:
    def __init__(self, task: dict[str, Any], index: int, node: str,
                 cpus: tuple[int, ...] = (), gpus: tuple[int, ...] = ()) -> None:
        self.task = task
        self.index = index
        self.node = node
        self.cpus = cpus  # its own CPUs on its node (a task with a NUMA policy)
        self.gpus = gpus  # and its own GPUs there
        self.proc: subprocess.Popen[bytes] | None = None
        self.step: int | None = None
        self.exit: int | None = None
        self.remote = False  # started through srun, which records its step itself
        self.started = False

    @property
    def name(self) -> str:
        return str(self.task["name"])


def remote_argv(r: Replica, pod: str, argv: list[str], cwd: str | None) -> list[str]:
    """The command of replica ``r`` on another node: a step there named after its pod,
    bound to its own CPUs (a task with a NUMA policy) among those the job holds there,
    and to those CPUs' NUMA nodes' memory."""
    srun = [sys.executable, "-c", "import sys; from corral.shims.lean import main; "
            "main('srun', sys.argv[1:])", "-N1", "-n1", "-w", r.node, "-J", pod,
            f"--cpus-per-task={r.task['cpus']}", "--export=ALL"]
    if r.cpus:
        srun.append(f"--cpu-bind=mask_cpu:{sum(1 << c for c in r.cpus):#x}")
        srun.append("--mem-bind=local")
    if r.gpus:
        srun.append(f"--gpu-bind=mask_gpu:{sum(1 << g for g in r.gpus):#x}")
    if cwd:
        srun.append(f"--chdir={cwd}")
    return srun + argv


def container_flags(task: dict[str, Any], env: dict[str, str]) -> list[str]:
    """``srun``'s container options for a replica of ``task`` (none: it runs on the host).
    The replica's own variables (the container's ``env``, the plugins', the pod name)
    win over the image's ``Env``."""
    image = task.get("run_image")
    if not image:
        return []
    flags = [f"--container-image={image}"]
    if task.get("mounts"):
        flags.append("--container-mounts=" + ",".join(task["mounts"]))
    if task.get("workdir"):
        flags.append(f"--container-workdir={task['workdir']}")
    else:  # Kubernetes: the image's WorkingDir
        flags.append("--container-image-workdir")
    if "command" in task and not task["command"]:
        # no command: the image's ENTRYPOINT, before the args or else its CMD
        flags.append("--container-entrypoint")
    names = sorted(n for n in env if n in task["env"] or n.startswith(("VC_", "VK_"))
                   or n in ("CORRAL_POD_NAME", "HOSTNAME"))
    if names:
        flags.append("--container-env=" + ",".join(names))
    return flags


def own_gpus(gpus: tuple[int, ...], job_gpus: str) -> dict[str, str]:
    """The GPU variables of a replica with its own GPUs (those of the job's here; none:
    the job's stay)."""
    have = [g for g in job_gpus.split(",") if g]
    mine = [str(g) for g in gpus if str(g) in have]
    if not mine:
        return {}
    ids = ",".join(mine)
    return {"CUDA_VISIBLE_DEVICES": ids, "GPU_DEVICE_ORDINAL": ids}


def _pinner(cpus: set[int]) -> Any:
    """The pre-exec step of a pinned replica here: its CPUs, and its memory from the NUMA
    nodes of those CPUs (``set_mempolicy`` MPOL_BIND, as ``srun --mem-bind=local``)."""
    from corral.agent import membind

    try:
        mems = membind.bind_task("local", 0, tuple(sorted(cpus)), membind.allowed_nodes())
    except (OSError, membind.MemBindError):
        mems = None

    def pin() -> None:
        os.sched_setaffinity(0, cpus)
        if mems is not None:
            with contextlib.suppress(OSError):
                membind.apply(mems)
    return pin


class Launcher:
    def __init__(self, plan: dict[str, Any], env: dict[str, str]) -> None:
        self.plan = plan
        self.env = env
        self.job_id = env.get("CORRAL_JOB_ID") or env.get("SLURM_JOB_ID", "0")
        self.here = env.get("SLURMD_NODENAME", "")
        # a companion of late replicas (volcano_late) logs into its root job's directory
        self.root = str(plan.get("late_of") or self.job_id)
        self.dir = log_dir(env.get("CORRAL_SUBMIT_DIR") or os.getcwd(), self.root)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.layout = parse_layout(env.get("CORRAL_VC_LAYOUT", ""))
        cpus = parse_cpus(env.get("CORRAL_VC_CPUS", ""))
        gpus = parse_cpus(env.get("CORRAL_VC_GPUS", ""))
        self.replicas: list[Replica] = []
        for t in plan["tasks"]:
            slots = self.layout.get(t["name"], [])
            mine = cpus.get(t["name"], [])
            mine_g = gpus.get(t["name"], [])
            idx = list(t.get("indices") or range(int(t["replicas"])))
            for k in range(min(len(idx), len(slots))):
                self.replicas.append(Replica(t, idx[k], slots[k],
                                             mine[k] if k < len(mine) else (),
                                             mine_g[k] if k < len(mine_g) else ()))
        self.retries = 0
        self.client: Any = None
        self.base = self._base_env()

    def _base_env(self) -> dict[str, str]:
        base = dict(self.env)
        plugins = self.plan.get("plugins") or []
        if "svc" in plugins:
            hdir = self.dir / "hosts"
            hdir.mkdir(exist_ok=True)
            for t in self.plan["tasks"]:
                hosts = [r.node for r in self.replicas if r.name == t["name"]]
                (hdir / f"{t['name']}.host").write_text("".join(h + "\n" for h in hosts))
                base[f"VC_{env_name(t['name'])}_HOSTS"] = ",".join(hosts)
                base[f"VC_{env_name(t['name'])}_NUM"] = str(len(hosts))
            base["VC_HOSTFILE_DIR"] = str(hdir)
        if "ssh" in plugins:
            base["PATH"] = f"{self._ssh_shim()}:{base.get('PATH', '/usr/bin:/bin')}"
        return base

    def _ssh_shim(self) -> Path:
        """The ``ssh`` plugin: an ``ssh`` for the replicas that runs its command on the
        named host of this job as a step (``srun --overlap -N1 -n1 -w HOST``). A host is
        a node name (the host files') or a replica's pod name (``<pod>``,
        ``<pod>.<job>``), mapped to its node through ``bin/pods``."""
        bdir = self.dir / "bin"
        bdir.mkdir(exist_ok=True)
        job = self.plan["job"]
        (bdir / "pods").write_text("".join(
            f"{pod_name(job, r.name, r.index)} {r.node}\n"
            f"{pod_name(job, r.name, r.index)}.{job} {r.node}\n" for r in self.replicas))
        srun = (f"{shlex.quote(sys.executable)} -c 'import sys; from corral.shims.lean import "
                "main; main(\"srun\", sys.argv[1:])'")
        script = SSH_SHIM.replace("@PODS@", shlex.quote(str(bdir / "pods"))) \
            .replace("@SRUN@", srun)
        shim = bdir / "ssh"
        shim.write_text(script)
        shim.chmod(0o755)
        return bdir

    # ---- steps (the controller's record of each replica) --------------------------------

    def _api(self) -> Any:
        if self.client is None:
            from corral.client import Client

            self.client = Client()
        return self.client

    def _record_start(self, r: Replica) -> None:
        if r.remote:
            return
        try:
            r.step = self._api().start_step(
                self.job_id, r.task["argv"], name=pod_name(self.plan["job"], r.name, r.index),
                nodes=[r.node], num_cpus=int(r.task["cpus"]),
                pid=r.proc.pid if r.proc else None)
        except Exception as exc:  # the replica runs anyway; its phase is then the job's
            print(f"corral: cannot record replica {r.name}-{r.index}: {exc}", file=sys.stderr)

    def _record_end(self, r: Replica, code: int) -> None:
        if r.step is None:
            return
        try:
            sig = -code if code < 0 else 0
            self._api().end_step(self.job_id, r.step, exit_code=max(code, 0), signal=sig)
        except Exception as exc:
            print(f"corral: cannot record the end of {r.name}-{r.index}: {exc}",
                  file=sys.stderr)

    # ---- processes ------------------------------------------------------------------------

    def start(self, r: Replica) -> None:
        t = r.task
        env = dict(self.base)
        env.update(t["env"])
        if "env" in (self.plan.get("plugins") or []):
            env["VC_TASK_INDEX"] = env["VK_TASK_INDEX"] = str(r.index)
        pod = pod_name(self.plan["job"], r.name, r.index)
        env["CORRAL_POD_NAME"] = env.setdefault("HOSTNAME", pod)
        # a new run starts a new log (job ids of another cluster may have written it);
        # a restarted replica appends
        out = open(self.dir / f"{pod}.log", "ab" if r.started else "wb")
        r.started = True
        argv = list(t["argv"])
        cwd = t.get("workdir") or None
        ctr = container_flags(t, env)
        r.remote = bool(ctr) or bool(r.node and self.here and r.node != self.here)
        pin: set[int] = set()
        if r.remote:  # a step on the replica's node, named after the pod (in its image)
            argv = remote_argv(r, pod, ctr + argv, cwd)
        else:
            pin = pin_set(r.cpus)
            env.update(own_gpus(r.gpus, env.get("CUDA_VISIBLE_DEVICES", "")))
        try:  # (an image replica's workingDir is inside its image: srun --chdir takes it)
            r.proc = subprocess.Popen(argv, env=env, cwd=None if ctr else cwd, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=_pinner(pin) if pin else None)
        except OSError as exc:
            out.write(f"corral: cannot start {argv[0]}: {exc}\n".encode())
            r.proc = None
            r.exit = 127
        finally:
            out.close()
        r.exit = None if r.proc is not None else 127
        self._record_start(r)
        if r.proc is None:
            self._record_end(r, 127)

    def kill(self, replicas: list[Replica]) -> None:
        for r in replicas:
            if r.proc is not None and r.exit is None:
                try:
                    os.killpg(r.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for r in replicas:
            if r.proc is not None and r.exit is None:
                try:
                    code = r.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(r.proc.pid, signal.SIGKILL)
                    code = r.proc.wait()
                r.exit = code
                self._record_end(r, code)

    # ---- policies ---------------------------------------------------------------------------

    def _action(self, r: Replica, code: int, event: str) -> str | None:
        for p in list(r.task.get("policies") or []) + list(self.plan.get("policies") or []):
            if p.get("exit_code") is not None:
                if event != "TaskCompleted" and code == p["exit_code"]:
                    return str(p["action"])
            elif event in p["events"] or ("*" in p["events"] and event != "TaskCompleted") \
                    or (event == "PodFailed" and "PodEvicted" in p["events"]):
                return str(p["action"])
        return None

    def _task_failed(self, r: Replica) -> bool:
        """Too many of the task's replicas failed for its minimum (``minAvailable`` of the
        task, all its replicas when unset) to succeed any more."""
        mates = [x for x in self.replicas if x.name == r.name]
        failed = sum(1 for x in mates if x.exit not in (None, 0))
        need = r.task.get("min_available")
        need = int(r.task["replicas"]) if need is None else int(need)
        return len(mates) - failed < max(need, 1)

    def _limit(self, r: Replica) -> int:
        own = r.task.get("max_retry")
        return int(own if own is not None else self.plan.get("max_retry", 3))

    def _submit_late(self) -> None:
        """Replicas without a slot run in a companion job once they fit (volcano_late)."""
        from corral.frontends import volcano_late

        late = volcano_late.missing(self.plan, self.layout)
        if not late:
            return
        try:
            got = self._api().submit_result(volcano_late.companion(
                self.plan, late, self.root, self.env.get("CORRAL_SUBMIT_DIR") or os.getcwd(),
                self.env, python=str(self.plan.get("python") or sys.executable)))
            print(f"corral: late replicas {late} wait in job {got.get('job_ids')}",
                  file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - the gang's own replicas run anyway
            print(f"corral: cannot submit the late replicas {late}: {exc}", file=sys.stderr)

    def end_parts(self, action: str) -> None:
        """The job ends early: stop the other parts (the root's companions; or, from a
        companion, the root, whose stop cancels the rest)."""
        from corral.frontends import volcano_late

        if self.root == self.job_id:
            volcano_late.cancel_parts(self._api(), self.plan["job"], self.root)
        elif action in ("AbortJob", "TerminateJob"):
            try:
                self._api().cancel([self.root])
            except Exception as exc:  # noqa: BLE001
                print(f"corral: cannot end job {self.root}: {exc}", file=sys.stderr)

    def run(self) -> int:
        self._submit_late()
        for r in self.replicas:
            self.start(r)
        while True:
            live = [r for r in self.replicas if r.exit is None and r.proc is not None]
            if not live:
                break
            ended = self._wait_one(live)
            code = ended.exit if ended.exit is not None else 1
            action = self._action(ended, code, "PodFailed") if code != 0 else None
            if code != 0 and action is None and self._task_failed(ended):
                action = self._action(ended, code, "TaskFailed")
            if code == 0:
                mates = [x for x in self.replicas if x.name == ended.name]
                if all(x.exit == 0 for x in mates):
                    action = self._action(ended, 0, "TaskCompleted")
                enough = self.plan.get("min_success")
                if enough and sum(1 for x in self.replicas if x.exit == 0) >= int(enough):
                    action = "CompleteJob"  # minSuccess replicas succeeded: the job is done
            verdict = self._apply(action, ended)
            if verdict is not None:
                return verdict
        ok = sum(1 for r in self.replicas if r.exit == 0)
        need = int(self.plan.get("min_success") or self.plan.get("min_available")
                   or len(self.replicas))
        if self.plan.get("late_of"):
            need = 0  # a companion's replicas count in the root job's verdict (kubectl)
        print(f"corral: {ok} of {len(self.replicas)} replicas succeeded (minAvailable "
              f"{need})", file=sys.stderr)
        return 0 if ok >= min(need, len(self.replicas)) and self.replicas else EXIT_FAILED

    def _apply(self, action: str | None, r: Replica) -> int | None:
        if action is None:
            return None
        print(f"corral: {r.name}-{r.index} ended with {r.exit}: {action}", file=sys.stderr)
        if action in ("AbortJob", "TerminateJob", "CompleteJob"):
            self.kill(self.replicas)
            self.end_parts(action)
            return {"AbortJob": EXIT_ABORTED, "TerminateJob": EXIT_TERMINATED}.get(action, 0)
        self.retries += 1
        if self.retries > self._limit(r):
            print(f"corral: maxRetry {self._limit(r)} reached", file=sys.stderr)
            self.kill(self.replicas)
            self.end_parts("AbortJob")
            return EXIT_FAILED
        group = {"RestartPod": [r], "RestartTask": [x for x in self.replicas
                                                    if x.name == r.name]}.get(
            action, self.replicas)
        self.kill(group)
        for x in group:
            self.start(x)
        return None

    def _wait_one(self, live: list[Replica]) -> Replica:
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                pid, status = 0, 0
            for r in live:
                if r.proc is not None and (r.proc.pid == pid or pid == 0):
                    if pid == 0:
                        r.proc.wait()
                        code = r.proc.returncode
                    else:
                        code = os.waitstatus_to_exitcode(status)
                        r.proc.returncode = code
                    r.exit = code
                    self._record_end(r, code)
                    return r
            time.sleep(0)


def main() -> None:
    plan = json.loads(sys.stdin.read())
    launcher = Launcher(plan, dict(os.environ))

    def stop(_sig: int, _frame: Any) -> None:
        launcher.kill(launcher.replicas)
        if launcher.root == launcher.job_id:
            launcher.end_parts("TerminateJob")
        sys.exit(EXIT_TERMINATED)

    signal.signal(signal.SIGTERM, stop)
    sys.exit(launcher.run())


if __name__ == "__main__":
    main()
