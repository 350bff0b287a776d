"""The loss item's journal (`ina bench reliability --item loss`): every iteration is kept the
moment it ends, so a row can be measured over several sittings.

At 20 × 4 MB one row of the 4-leaf/4-spine takes one to five hours (100-850 s
per iteration), longer than a machine may stay up. `<out>/loss.jsonl` holds a header naming
what the rows were measured with, then one line per event: an emulation started for a row, an
iteration ended, an emulation ended (its nft counters, plan versions, error). `--resume`
reads it back and runs only the iterations a row still lacks, on a fresh emulation; a row
whose iteration hung is final (its hang is the measurement). An emulation that started but
never ended (the machine went down) lost its counters: the row says how many did. Each
emulation's start records the code it ran (`code_revision`), so a row whose sittings ran
different commits says so, and the report gives each sitting's own mean and resends: on a
shared machine sittings hours apart need not run alike even on the same code (the
unimpaired 4x4 took 138.5 s an iteration in one session and 87.7 s in the next). A sitting
may therefore open with unimpaired reference iterations on its own emulation, just before the
impairment goes on (`reference` lines): its slowdown is then a ratio within one run.

A hand-written JSON-lines file, like `compare.py`'s records journal: append-only, so a line
cut short by a kill is the only loss; resuming drops it. Any other bad line is refused, not
skipped: an iteration would go missing without a word.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from controller.emulation.faults.delayline import COUNTS as DELAY_LINE_COUNTS
from controller.emulation.faults.impair import frame_rates
from controller.emulation.mininet_runner import IterationResult

# Counts summed over a row's iterations; a row without a finished iteration has none (null in
# the JSON, "–" in the table, a gap in the plot), not 0, which would read as a measurement.
PER_ITERATION = (
    "retransmissions",
    "resent_on_timeout",
    "resent_on_control",
    "resent_on_loss",
    "fragments",
    "fragments_finished",
    "miscounted",
    "duplicates_ignored_at_ps",
)
# nft and interface counters summed over a row's emulations, in `frame_rates`' order
_FRAME_COUNTS = ("frames_offered", "frames_hit", "frames_received_by_far_ends")


class JournalMismatch(ValueError):
    """A journal `--resume` cannot go on from: measured with other settings (two
    experiments, not one), or a line inside it that is no entry of ours."""


def iteration_record(it: IterationResult) -> dict:
    """What a row keeps of one iteration: the PS's exactly-once counts and the workers'
    resends by cause."""
    reports = it.worker_reports.values()
    return {
        "seconds": it.seconds,
        "exact": it.exact,
        "retransmissions": it.retransmissions,
        "resent_on_timeout": sum(r["resent_on_timeout"] for r in reports),
        "resent_on_control": sum(r["resent_on_control"] for r in reports),
        # found lost from later results or by the tail probe (dataplane/worker.py, RACK)
        "resent_on_loss": sum(r.get("resent_on_loss", 0) for r in reports),
        # loss queries sent and NACKs received (Worker.query): not resends
        "queries": sum(r.get("queries", 0) for r in reports),
        "nacks": sum(r.get("nacks", 0) for r in reports),
        # HELD answers received, and results that came with the congestion mark
        "held": sum(r.get("held", 0) for r in reports),
        "marked": sum(r.get("marked", 0) for r in reports),
        # how losses were found (retransmission timeouts; later results or the tail probe),
        # the PROBEs sent (each one the PS answers with a result to its sender) and named
        # NACKs received: what sets a slow iteration apart from a fast one of the same row
        "timed_out": sum(r.get("timed_out", 0) for r in reports),
        "detected_lost": sum(r.get("detected_lost", 0) for r in reports),
        "probes": sum(r.get("probes", 0) for r in reports),
        "named": sum(r.get("named", 0) for r in reports),
        # the largest smoothed round trip among the workers at the end of the iteration (ms)
        "srtt_ms": max((r.get("srtt_ms", 0.0) for r in reports), default=0.0),
        # the workers' retransmission timeout at the end of the iteration (median, ms)
        "rto_ms": statistics.median(r.get("rto_ms", 0) for r in reports),
        "fragments": it.ps_report.get("fragments", 0),
        "fragments_finished": it.ps_report.get("finished", 0),
        "miscounted": it.ps_report.get("miscounted", 0),
        "duplicates_ignored_at_ps": it.ps_report.get("duplicates_ignored", 0),
        # results the PS sent (one per fragment, more for repairs) and query rounds it had
        # answered already (dataplane/ps.py)
        "results_sent_by_ps": it.ps_report.get("results_sent", 0),
        "queries_quiet_at_ps": it.ps_report.get("queries_quiet", 0),
        "workers": len(it.worker_reports),
    }


def recovery_cost(run: dict) -> dict:
    """What a row's recovery cost against what its impairment dropped: the workers' resends
    by cause, the frames the nft loss rules dropped (by kind), resends per frame dropped,
    and resends as a share of the fragments the workers sent (the figure that counts for
    an unimpaired row, where nothing is dropped)."""
    lost = run["measured"].get("frames_lost")
    dropped = sum(lost.values()) if lost else None
    resends = run["retransmissions"]
    sent = run.get("worker_fragments")
    return {
        "resends": resends,
        "resends_by_cause": {
            cause: run[f"resent_on_{cause}"] for cause in ("loss", "timeout", "control")
        },
        "frames_lost": dropped,
        "frames_lost_by_kind": lost,
        "resends_per_lost_frame": (
            round(resends / dropped, 3) if dropped and resends is not None else None
        ),
        "resent_percent": round(100 * resends / sent, 3) if sent and resends is not None else None,
        "queries": run.get("queries"),
        "nacks": run.get("nacks"),
    }


def summary(records: list[dict]) -> dict:
    """A row's figures from its iteration records."""
    if not records:
        return {
            "iterations_completed": 0,
            "exact": False,
            "mean_seconds": None,
            **dict.fromkeys(PER_ITERATION),
            "rto_ms": [],
            "seconds": [],
        }
    return {
        "iterations_completed": len(records),
        "exact": all(r["exact"] for r in records),
        "mean_seconds": statistics.mean(r["seconds"] for r in records),
        **{key: sum(r[key] for r in records) for key in PER_ITERATION},
        "rto_ms": [r["rto_ms"] for r in records],
        "seconds": [r["seconds"] for r in records],
        # fragments all workers sent once each (records before this was kept have none)
        "worker_fragments": sum(r["fragments"] * r.get("workers", 0) for r in records),
        "queries": sum(r.get("queries", 0) for r in records),
        "nacks": sum(r.get("nacks", 0) for r in records),
    }


@dataclass
class Row:
    """What the journal holds of one (topology, row)."""

    records: list[dict] = field(default_factory=list)
    sessions: list[dict] = field(default_factory=list)  # emulations that ended
    started: int = 0  # emulations started
    revisions: list[str] = field(default_factory=list)  # code they ran, each named once
    # per emulation started: the code it ran and the iterations it measured, so that a row
    # measured over sittings shows each one's own figures (a shared machine's load, or the
    # machine itself, may differ between them)
    sittings: list[dict] = field(default_factory=list)

    @property
    def error(self) -> str | None:
        return next((s["error"] for s in self.sessions if s.get("error")), None)

    def report(self) -> dict:
        """The row as the report gives it: its iterations' figures, and its emulations'
        counters summed (plan versions: the most any one emulation made)."""
        frames = [sum(s["measured"].get(key, 0) for s in self.sessions) for key in _FRAME_COUNTS]
        measured: dict = dict(frame_rates(*frames)) if frames[0] else {}
        lost = [m["frames_lost"] for s in self.sessions if "frames_lost" in (m := s["measured"])]
        if lost:
            measured["frames_lost"] = {k: sum(n[k] for n in lost) for k in lost[0]}
        if unread := sum(s["measured"].get("interfaces_unread", 0) for s in self.sessions):
            measured["interfaces_unread"] = unread  # the counts above miss their frames
        return {
            **summary(self.records),
            "measured": measured,
            "error": self.error,
            "plan_versions": max((s["plan_versions"] for s in self.sessions), default=None),
            "switch_duplicates": sum(s["switch_duplicates"] for s in self.sessions),
            # reorder rows: what the delay lines did with the frames they held (empty for
            # emulations that ended before the journal recorded it)
            "delay_lines": (
                {
                    key: sum(s.get("delay_lines", {}).get(key, 0) for s in self.sessions)
                    for key in DELAY_LINE_COUNTS
                }
                if any(s.get("delay_lines") for s in self.sessions)
                else {}
            ),
            "emulations": self.started,
            "code_revisions": self.revisions,
            "emulations_cut_short": self.started - len(self.sessions),
            "sittings": [
                _sitting_report(sitting) for sitting in self.sittings if sitting["records"]
            ],
            "slowdown_against_own_references": self._slowdown_against_references(),
        }

    def _slowdown_against_references(self) -> float | None:
        """Each iteration's seconds over its own sitting's reference mean, averaged over the
        iterations whose sitting has a reference (None if none has)."""
        ratios = [
            r["seconds"] / _reference_mean(sitting)
            for sitting in self.sittings
            if sitting["references"]
            for r in sitting["records"]
        ]
        return statistics.mean(ratios) if ratios else None

    def add(self, record: dict) -> None:
        """An iteration, counted in the row and in the sitting that measured it."""
        self.records.append(record)
        self._sitting()["records"].append(record)

    def add_reference(self, record: dict) -> None:
        """An unimpaired iteration that opened the current sitting."""
        self._sitting()["references"].append(record)

    def _sitting(self) -> dict:
        if not self.sittings:  # not written by this journal: it starts each emulation
            self.sittings.append(_new_sitting("not recorded"))
        return self.sittings[-1]


def _new_sitting(revision: str) -> dict:
    return {"revision": revision, "records": [], "references": []}


def _reference_mean(sitting: dict) -> float | None:
    references = sitting["references"]
    return statistics.mean(r["seconds"] for r in references) if references else None


def _sitting_report(sitting: dict) -> dict:
    figures, reference = summary(sitting["records"]), _reference_mean(sitting)
    return {
        "code_revision": sitting["revision"],
        "iterations": len(sitting["records"]),
        "mean_seconds": figures["mean_seconds"],
        "retransmissions": figures["retransmissions"],
        "reference_iterations": len(sitting["references"]),
        "reference_mean_seconds": reference,
        "reference_exact": all(r["exact"] for r in sitting["references"]),
        "slowdown": figures["mean_seconds"] / reference if reference else None,
    }


class Journal:
    """`<out>/loss.jsonl`: opened afresh, or read back to resume when `resume` is set."""

    def __init__(self, path: Path, settings: dict, resume: bool) -> None:
        self.path = path
        self.rows: dict[tuple[str, str], Row] = {}
        if resume and path.exists():
            self._read(settings)
        else:
            self._write({"journal": settings}, mode="w")

    def row(self, topology: str, label: str) -> Row:
        return self.rows.setdefault((topology, label), Row())

    def labels(self, topology: str) -> list[str]:
        """The rows of `topology` the journal holds, in the order they were first measured."""
        return [label for (t, label) in self.rows if t == topology]

    def started(self, topology: str, label: str) -> None:
        revision = code_revision()
        self._started(self.row(topology, label), revision)
        self._write({"topology": topology, "row": label, "started": True, "revision": revision})

    @staticmethod
    def _started(row: Row, revision: str | None) -> None:
        row.started += 1
        revision = revision or "not recorded"  # None: a line written before revisions were
        if revision not in row.revisions:  # recorded (7f58bdf)
            row.revisions.append(revision)
        row.sittings.append(_new_sitting(revision))

    def iteration(self, topology: str, label: str, record: dict) -> None:
        self.row(topology, label).add(record)
        self._write({"topology": topology, "row": label, "iteration": record})

    def reference(self, topology: str, label: str, record: dict) -> None:
        self.row(topology, label).add_reference(record)
        self._write({"topology": topology, "row": label, "reference": record})

    def ended(self, topology: str, label: str, session: dict) -> None:
        self.row(topology, label).sessions.append(session)
        self._write({"topology": topology, "row": label, "ended": session})

    def _write(self, entry: dict, mode: str = "a") -> None:
        with self.path.open(mode) as f:
            f.write(json.dumps(entry, separators=(",", ":")) + "\n")
            f.flush()

    def _read(self, settings: dict) -> None:
        lines = self.path.read_text().splitlines()
        if len(lines) > 1 and not _is_json(lines[-1]):
            # cut short by a kill: dropped, so that the entries written next start whole
            lines.pop()
            self.path.write_text("".join(line + "\n" for line in lines))
        try:
            header = json.loads(lines[0]).get("journal") if lines else None
        except (ValueError, AttributeError):
            header = None
        if header != settings:
            raise JournalMismatch(
                f"{self.path} holds rows measured with {header}, not with {settings}; run "
                "again without --resume (a fresh journal) or with the same --gradient-mb, "
                "--timeout, --target, --scheme and --scale-mbps"
            )
        for number, line in enumerate(lines[1:], start=2):
            try:
                entry = json.loads(line)
                row = self.row(entry["topology"], entry["row"])
                if "started" in entry:
                    self._started(row, entry.get("revision"))
                elif "iteration" in entry:
                    row.add(entry["iteration"])
                elif "reference" in entry:
                    row.add_reference(entry["reference"])
                else:
                    row.sessions.append(entry["ended"])
            except (ValueError, KeyError, TypeError):
                raise JournalMismatch(
                    f"{self.path} line {number} is not an entry of this journal "
                    f"({line[:80]!r}); only its last line may be cut short. Run again "
                    "without --resume (a fresh journal), or remove that line if you edited "
                    "the file"
                ) from None


PROJECT_ROOT = Path(__file__).resolve().parents[3]


def code_revision(root: Path = PROJECT_ROOT) -> str:
    """The commit the code under `root` was checked out at, `+changes` when its code differs
    from it (the journal and other files outside the code do not count), or "not a git
    checkout" (also when `root` is only somewhere inside another repository, as an installed
    copy in a virtualenv inside one would be: that repository's commit says nothing here)."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "--short=12", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        changed = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--", ":/controller", ":/dataplane", ":/p4src"],
            cwd=root,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    toplevel, head = top.stdout.split()
    if Path(toplevel).resolve() != root.resolve():
        return "not a git checkout"
    return head + ("+changes" if changed.returncode else "")


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True
