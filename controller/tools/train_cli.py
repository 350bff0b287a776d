"""`ina train TOPO`: a data-parallel training run on Mininet whose gradients the switches sum.

Trains the NumPy MLP of dataplane/train on scikit-learn's digits three ways side by side: the
single-process float64 reference, then on Mininet hosts with each `--scheme`'s plan (the
workers all-reduce their shard gradients through the switches, dataplane/allreduce.py).
Prints accuracy per epoch and, per scheme, the final accuracy against the reference, time
per step, bytes into the PS per step and whether every step's sum was exact; writes JSON
and a PNG (accuracy per epoch, time per step).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from controller.tools.arguments import UserError, count, scheme_spec, solver_seed

DEFAULT_TIMEOUT = 30.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", help="train a small model data-parallel on Mininet, gradients summed in-network"
    )
    p.add_argument("topology", help="topology YAML file; its first job's first task trains")
    p.add_argument(
        "--scheme",
        action="append",
        help="routing scheme, repeatable to compare schemes side by side (default shortest)",
    )
    p.add_argument(
        "--workers",
        type=count,
        metavar="N",
        help="train on the task's first N workers (default: all)",
    )
    p.add_argument("--epochs", type=count, default=10, help="epochs (default 10)")
    p.add_argument(
        "--batch-per-worker",
        type=count,
        default=16,
        metavar="B",
        help="samples per worker per step; the global batch is N*B (default 16)",
    )
    p.add_argument("--lr", type=_fraction, default=0.1, help="learning rate (default 0.1)")
    p.add_argument(
        "--seed",
        type=solver_seed,
        default=0,
        help="seed of the weights and batch order (default 0)",
    )
    p.add_argument(
        "--target",
        choices=["embedded", "bmv2"],
        default="embedded",
        help="switch program: the embedded Python target (default) or bmv2 running ina.p4",
    )
    p.add_argument(
        "--loss",
        type=_percent,
        default=0.0,
        metavar="PCT",
        help="percent of frames dropped on every link, both ways (default 0)",
    )
    p.add_argument(
        "--cut-link",
        type=_cut,
        metavar="A-B@EPOCH",
        help="cut link A-B halfway through EPOCH (1-based); the controller re-plans",
    )
    p.add_argument(
        "--timeout",
        type=_fraction,
        default=DEFAULT_TIMEOUT,
        help=f"seconds a step may go without a result (default {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument("--json", metavar="OUT", help="write the runs as JSON")
    p.add_argument("--png", metavar="OUT", help="plot accuracy per epoch and time per step")
    p.set_defaults(func=cmd_train)


def _fraction(text: str) -> float:
    from controller.tools.arguments import positive

    return positive(text)


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 100:
        raise argparse.ArgumentTypeError(f"{text!r}: give a percentage from 0 up to 100")
    return value


def _cut(text: str) -> tuple[str, str, int]:
    link, at, epoch = text.partition("@")
    a, dash, b = link.partition("-")
    if not (at and dash and a and b):
        raise argparse.ArgumentTypeError(f"{text!r}: write it as A-B@EPOCH, e.g. L1-S1@2")
    return a, b, count(epoch)


def cmd_train(args: argparse.Namespace) -> int:
    from controller.cli import _check_writable, _write_json, console
    from controller.emulation import mininet_runner as runner
    from controller.emulation import training
    from controller.model.network import load_topology
    from controller.solvers import SchemeInputError, SolveOptions, solve
    from dataplane.train import data as digits
    from dataplane.train import loop

    _check_writable(args.json, "--json")
    _check_writable(args.png, "--png")
    network = _one_task(load_topology(args.topology), args.topology, args.workers)
    workers = len(network.tasks[0].workers)
    if args.cut_link:
        a, b, epoch = args.cut_link
        if not network.graph.has_edge(a, b):
            raise UserError(f"--cut-link {a}-{b}: {args.topology} has no link {a}-{b}")
        if epoch > args.epochs:
            raise UserError(f"--cut-link at epoch {epoch}: the run has {args.epochs} epochs")
    schemes = args.scheme or ["shortest"]
    plans = []
    for spec in schemes:
        name, own = scheme_spec(spec)
        try:
            plans.append(solve(network, name, SolveOptions(None, args.seed, params=own)))
        except SchemeInputError as exc:
            raise UserError(str(exc)) from None
    if reason := runner.missing_mininet():
        raise UserError(reason)
    config = loop.Config(
        epochs=args.epochs,
        batch=args.batch_per_worker * workers,
        lr=args.lr,
        seed=args.seed,
    )
    data = digits.load()
    _, reference = loop.run(config, data, loop.reference(config, data))
    console.print(
        f"reference (float64, one process, batch {config.batch}): final accuracy "
        f"{reference[-1].accuracy:.2%}",
        highlight=False,
    )
    faults = training.Faults(args.loss, args.cut_link)
    runs = []
    for spec, plan in zip(schemes, plans, strict=True):
        console.print(_plan_line(spec, plan), highlight=False)
        try:
            run = training.train(
                network,
                plan,
                config,
                target=args.target,
                faults=faults,
                timeout=args.timeout,
                on_epoch=lambda ln, s=spec: console.print(
                    f"{s}: epoch {ln['epoch']} accuracy {ln['accuracy']:.2%}", highlight=False
                ),
            )
        except runner.RunnerError as exc:
            console.print(f"[bold red]error:[/bold red] {exc}", soft_wrap=True, highlight=False)
            return 1
        run.scheme = spec
        runs.append(run)
    report = _report(args, config, reference, runs, faults)
    _print(console, report)
    if args.json:
        _write_json(args.json, report, "results")
    if args.png:
        plot(report, Path(args.png))
        console.print(f"plot written to {args.png}")
    return 0 if all(_ok(report, r) for r in report["runs"]) else 1


def _plan_line(spec: str, plan) -> str:
    """The plan in one line: its rate and where it aggregates (`ina solve` shows it all)."""
    tp = plan.tasks[0]
    where = ", ".join(sorted({a.switch for a in tp.aggregation})) or "nowhere (the PS sums)"
    return f"{spec}: rate {tp.rate_gbps:g} Gbps, aggregating at {where}"


MAX_ACCURACY_GAP = 0.005  # INA's final accuracy within half a point of the reference's


def _ok(report: dict, run: dict) -> bool:
    gap = abs(run["epochs"][-1]["accuracy"] - report["reference"][-1]["accuracy"])
    return run["exact"] and gap <= MAX_ACCURACY_GAP


def _one_task(network, path: str, workers: int | None):
    """The topology with only its first job's first task, on its first `workers` workers:
    the controller is started on the file, so a narrowed one is written beside the run."""
    from controller.model.network import load_topology

    if not network.tasks:
        raise UserError(f"{path}: no job to train (add a job with a task: ps and workers)")
    task = network.tasks[0]
    have = len(task.workers)
    n = workers or have
    if n > have:
        raise UserError(f"--workers {n}: task {task.job}/{task.name} of {path} has {have} workers")
    if n < 2:
        raise UserError("--workers: data-parallel training needs at least 2 workers")
    spec = yaml.safe_load(Path(path).read_text())
    job = next(j for j in spec["jobs"] if j["name"] == task.job)
    first = next(t for t in job["tasks"] if t["name"] == task.name)
    spec["jobs"] = [{**job, "tasks": [{**first, "workers": list(task.workers[:n])}]}]
    out = Path(tempfile.mkdtemp(prefix="ina-train-")) / Path(path).name
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_topology(out)


def _report(args, config, reference, runs, faults) -> dict:
    return {
        "topology": args.topology,
        "target": args.target,
        "workers": runs[0].workers if runs else None,
        "config": {
            "epochs": config.epochs,
            "batch": config.batch,
            "lr": config.lr,
            "momentum": config.momentum,
            "seed": config.seed,
            "sizes": list(config.sizes),
        },
        "faults": {"loss_percent": faults.loss_percent, "cut": faults.cut},
        "reference": [
            {k: v for k, v in e.to_dict().items() if k != "step_seconds"} for e in reference
        ],
        "runs": [r.to_dict() for r in runs],
    }


def _print(console, report: dict) -> None:
    from rich.table import Table

    from controller.tools.tables import print_table

    runs = report["runs"]
    table = Table(title="test accuracy per epoch (%)")
    table.add_column("epoch", justify="right")
    table.add_column("reference", justify="right")
    for r in runs:
        table.add_column(r["scheme"], justify="right")
    for i, ref in enumerate(report["reference"]):
        table.add_row(
            str(ref["epoch"]),
            f"{ref['accuracy'] * 100:.2f}",
            *(f"{r['epochs'][i]['accuracy'] * 100:.2f}" for r in runs),
        )
    print_table(console, table)
    summary = Table(title=f"{report['workers']} workers, {report['target']} target")
    for col in ("scheme", "final %", "vs ref", "allreduce ms", "KB to PS/step", "exact steps"):
        summary.add_column(col, justify="right")
    final = report["reference"][-1]["accuracy"]
    for r in runs:
        acc = r["epochs"][-1]["accuracy"]
        steps = sorted(r["step_seconds"])
        median = steps[len(steps) // 2] if steps else 0.0
        summary.add_row(
            r["scheme"],
            f"{acc * 100:.2f}",
            f"{(acc - final) * 100:+.2f}",
            f"{median * 1000:.0f}",
            f"{r['ps_bytes_per_step'] / 1000:.1f}",
            f"{r['exact_steps']}/{r['steps']}" + ("" if r["same_params"] else " (params differ)"),
        )
    print_table(console, summary)
    for r in runs:
        if lost := r.get("loss_measured"):
            console.print(
                f"{r['scheme']}: the links dropped {lost['frames_hit']:,} of "
                f"{lost['frames_offered']:,} frames ({lost['hit_percent']:g} %)",
                highlight=False,
            )
        if r.get("cut_at_step"):
            console.print(
                f"{r['scheme']}: link cut at step {r['cut_at_step']}, "
                f"{r['replans']} re-plan(s) followed",
                highlight=False,
            )


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc, step) = plt.subplots(1, 2, figsize=(11, 4))
    for r in report["runs"]:
        acc.plot(
            [e["epoch"] for e in r["epochs"]],
            [e["accuracy"] * 100 for e in r["epochs"]],
            marker="o",
            label=r["scheme"],
        )
        step.plot(
            range(1, len(r["step_seconds"]) + 1),
            [s * 1000 for s in r["step_seconds"]],
            label=r["scheme"],
            lw=0.8,
        )
    ref = report["reference"]  # drawn last: the runs it matches would hide it
    acc.plot(
        [e["epoch"] for e in ref],
        [e["accuracy"] * 100 for e in ref],
        "k--",
        lw=1.5,
        label="reference (float64)",
    )
    acc.set(xlabel="epoch", ylabel="test accuracy (%)", title="accuracy per epoch")
    step.set(xlabel="step", ylabel="all-reduce time (ms)", title="time per step")
    step.set_yscale("log")
    faults = report["faults"]
    extra = []
    if faults["loss_percent"]:
        extra.append(f"{faults['loss_percent']:g} % loss per link")
    if faults["cut"]:
        a, b, e = faults["cut"]
        extra.append(f"{a}-{b} cut in epoch {e}")
    fig.suptitle(
        f"ina train: {report['workers']} workers on {Path(report['topology']).stem}, "
        f"{report['target']} target" + (f" ({', '.join(extra)})" if extra else "")
    )
    for ax in (acc, step):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
