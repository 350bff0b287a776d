"""Model sharding (EINA Sec. III-C, after MTREE): a job's tasks may each carry a fraction of
the model, the Plan's optional per-task `model_share`.

Without it, a task carries the whole gradient (each task is its own model, as in ARO's
multi-task jobs). With it, PS p receives `model_share` of every worker's gradient, so the
task moves share · gradient and the job's communication time is its slowest shard's:
max over its tasks of share · gradient / r_p. EINA sets share_p = r_p / Σ r, which makes every
shard finish together at gradient / Σ r.
"""

from __future__ import annotations

from collections import defaultdict
from math import inf

from controller.model.plan import TaskPlan

_TOLERANCE = 1e-6


def share(tp: TaskPlan) -> float:
    return 1.0 if tp.model_share is None else tp.model_share


def problems(tasks: list[TaskPlan]) -> list[str]:
    """Shares are all-or-nothing per job, each within [0, 1], and add up to 1."""
    by_job: dict[str, list[TaskPlan]] = defaultdict(list)
    for tp in tasks:
        by_job[tp.job].append(tp)
    found = []
    for job, tps in by_job.items():
        given = [tp.model_share for tp in tps if tp.model_share is not None]
        if not given:
            continue
        if len(given) != len(tps):
            found.append(f"job {job}: model_share is given for some of its tasks but not all")
        elif any(not 0 <= s <= 1 for s in given):
            found.append(f"job {job}: every model_share must be within [0, 1]")
        elif abs(sum(given) - 1) > _TOLERANCE:
            found.append(
                f"job {job}: the tasks' model_share values add up to {sum(given):.6g}, not 1"
            )
    return found


def seconds(gradient_mb: float, fraction: float, rate_gbps: float) -> float:
    """Time to move `fraction` of a `gradient_mb` gradient at `rate_gbps` (MB → Gb)."""
    if fraction == 0:
        return 0.0
    return gradient_mb * fraction * 8 / 1000 / rate_gbps if rate_gbps > 0 else inf


def job_seconds(
    tasks: list[TaskPlan], rates: dict[tuple[str, str], float], gradient_mb: float
) -> dict[str, float]:
    """Per job, when its last shard (or, unsharded, its slowest task) arrives."""
    out: dict[str, float] = {}
    for tp in tasks:
        t = seconds(gradient_mb, share(tp), rates[tp.key])
        out[tp.job] = max(out.get(tp.job, 0.0), t)
    return out
