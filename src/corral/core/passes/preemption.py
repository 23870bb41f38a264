"""The pass's side of preemption: ask ``core.preempt`` for victims, account for them.

Victims' resources come back in the profile after their grace time (not now), so backfill
cannot take what the preemptor is waiting for.
"""

from __future__ import annotations

from corral.core import preempt as P
from corral.core.counts import CountProfile
from corral.core.feasibility import Option
from corral.core.limits import qos_name
from corral.core.model.job import Job, JobState
from corral.core.passes.state import PassState
from corral.core.pool import NodeUse, Pool, compiled
from corral.core.shape import Shape


class Preemptor(PassState):
    """Victim selection for jobs that cannot start now."""

    def try_preempt(self, job: Job, opts: list[Option]) -> bool:
        """Pick victims for ``job``; ``True`` when it will start once they (or ending jobs) go."""
        qos_of = self._qos_of
        job_qos_name = qos_of(job)
        job_qos = self.qos.get(job_qos_name) if job_qos_name else None
        ending = [j for j in self.snap.running if j.state == JobState.COMPLETING
                  and j.allocation is not None]
        for o in opts:
            victims = P.candidates(job, o.partition, job_qos, self.snap.running,
                                   self.table.partitions, self.qos, qos_of, self.config,
                                   self.preempting)
            if not victims:
                continue
            pmask = self.table.part_masks[o.partition.name]
            shape = o.shape
            name = o.partition.name
            sl = self.switch_limit(job, o)

            def fits(view: Pool, pmask: int = pmask, shape: Shape = shape, name: str = name,
                     sl: int | None = sl) -> bool:
                if view.free_cores_in(pmask) < shape.cpus_min // max(1, min(self.table.tpc)):
                    return False
                return self.placer.fits(shape, name, view, sl) is not None

            def touches(v: Job, pmask: int = pmask) -> bool:
                assert v.allocation is not None
                return any(pmask >> u.i & 1 for u in compiled(self.table, v.allocation))

            chosen = P.choose(victims, self.pool, ending, fits, touches)
            if chosen is None:
                continue
            for v in chosen:
                self.preempting.add(v.job.id)
                self._release_early(v)
            self.out.preemptions.extend(P.decisions(chosen, job.id))
            return True
        return False

    def _release_early(self, v: P.Victim) -> None:
        """In the profile, a victim's resources come back after its grace time."""
        assert v.job.allocation is not None
        uses: tuple[NodeUse, ...] = compiled(self.table, v.job.allocation)
        back = self.now + max(v.grace_s, 1)
        prof0 = self.profile()
        if isinstance(prof0, CountProfile):
            n = len(uses) if v.mode.value != "SUSPEND" else 0
            prof0.add(n, back, max(self.release_time(v.job), back))
            return
        prof = prof0
        prof._build()
        for u in uses:
            st = prof.steps[u.i]
            c = u.core_bits.bit_count() if u.core_bits > 0 else 0
            m = u.mem_mb if v.mode.value != "SUSPEND" else 0
            g = u.gpu_bits.bit_count() if v.mode.value != "SUSPEND" else 0
            st.add(back, max(self.release_time(v.job), back), c, m, g)

    def _qos_of(self, job: Job) -> str | None:
        return qos_name(job, self.qos)
