"""`GET /metrics`: the switches' counters and the jobs in Prometheus text format.

A prometheus_client collector reads the daemon's session at each scrape (the counters it polls
once a second), so nothing is kept twice and a scrape never waits for a switch. Per switch:
every INA counter (`controller.southbound.p4runtime.COUNTERS`) summed over its cells, and
whether the switch holds the plan; per job: its tasks' planned rates, the `forged` counter
cell the data plane keeps per job id and what its agents report (packets sent, aggregations,
collisions, losses and resends by cause, summed over agents); per controller: jobs admitted,
refused (by reason) and ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controller.southbound.p4runtime import COUNTERS

if TYPE_CHECKING:
    from controller.service.jobs import JobService


class SessionCollector(Collector):
    def __init__(self, service: JobService):
        self.service = service

    def collect(self) -> Iterator[Metric]:
        session = self.service.session
        for name in COUNTERS:
            family = CounterMetricFamily(
                f"ina_switch_{name}",
                f"packets counted in the INA counter {name}, all cells",
                labels=["switch"],
            )
            for switch, counters in sorted(session.counters.items()):
                family.add_metric([switch], sum(counters.get(name, [])))
            yield family
        programmed = GaugeMetricFamily(
            "ina_switch_programmed",
            "1 while the switch holds the plan and answers",
            labels=["switch"],
        )
        for switch, driver in sorted(session.drivers.items()):
            programmed.add_metric([switch], int(driver.programmed))
        yield programmed
        rate = GaugeMetricFamily(
            "ina_job_rate_gbps", "planned rate of the job's task", labels=["job", "job_id", "task"]
        )
        forged = CounterMetricFamily(
            "ina_job_forged",
            "packets naming the job from a host port not bound to it (all switches)",
            labels=["job", "job_id"],
        )
        for job_id, job in sorted(self.service.ids().items()):
            for tp in session.plan.tasks:
                if tp.job == job:
                    rate.add_metric([job, str(job_id), tp.task], tp.rate_gbps)
            forged.add_metric([job, str(job_id)], self.service.forged(job_id))
        yield rate
        yield forged
        yield from self._agent_counters()
        yield GaugeMetricFamily("ina_jobs_running", "jobs running", value=len(self.service.records))
        yield CounterMetricFamily(
            "ina_jobs_admitted", "jobs admitted through the API", value=len(self.service.admissions)
        )
        yield CounterMetricFamily(
            "ina_jobs_ended", "jobs ended through the API", value=self.service.deletions
        )
        refused = CounterMetricFamily(
            "ina_jobs_refused", "jobs refused, by reason", labels=["reason"]
        )
        for reason, n in sorted(self.service.refused.items()):
            refused.add_metric([reason], n)
        yield refused
        yield GaugeMetricFamily(
            "ina_plan_version", "version of the plan in force", value=session.version
        )

    def _agent_counters(self) -> Iterator[Metric]:
        """Per job, what its agents reported, summed over them (`POST /jobs/{id}/counters`)."""
        labels = ["job", "job_id"]
        plain = {
            "sent": "packets the job's agents sent",
            "aggregations": "results the job's workers received and fragments its PSs finished",
            "collisions": "CONTROL packets (slot collisions) the job's workers saw",
            "duplicates": "contributions the job's PSs had counted already",
        }
        families = {
            name: CounterMetricFamily(f"ina_job_{name}", text, labels=labels)
            for name, text in plain.items()
        }
        losses = CounterMetricFamily(
            "ina_job_losses",
            "fragments the job's workers took for lost, by cause",
            labels=[*labels, "cause"],
        )
        resends = CounterMetricFamily(
            "ina_job_resends",
            "packets the job's agents sent again, by cause",
            labels=[*labels, "cause"],
        )
        for job_id, job in sorted(self.service.ids().items()):
            total = self.service.agent_counters(job).total
            for name, family in families.items():
                family.add_metric([job, str(job_id)], getattr(total, name))
            for cause, n in total.losses.model_dump().items():
                losses.add_metric([job, str(job_id), cause], n)
            for cause, n in total.resends.model_dump().items():
                resends.add_metric([job, str(job_id), cause], n)
        yield from families.values()
        yield losses
        yield resends


def exposition(service: JobService) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SessionCollector(service))
    return generate_latest(registry)
