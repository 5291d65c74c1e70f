"""Batch conversion of many models: one worker process per model, started with multiprocessing's *spawn*.

Why spawn and one process per model: egglog (Rust, threads) hangs in a child forked from a process that has used it,
and TensorFlow is not fork-safe either; a fresh interpreter per model also gives each model its own memory limit
and lets a crash, a leak or a runaway ILP take down one model only. This module (the parent side) imports neither
TensorFlow nor egglog: only the workers do.

Per model: a wall-clock limit (the parent kills the worker's whole process group: solver subprocesses included) and
an address-space limit (resource.setrlimit(RLIMIT_AS) in the worker, before TensorFlow is imported). A model is
finished when its output folder holds saved_model.pb and its report (`OUT.report.json`, written after the publish)
exists: such models are skipped, so a batch that was interrupted resumes where it stopped. An output folder without
its report (killed between publish and report) is converted again and replaced.

Results: one JSON line per model on stdout as each one ends (model, status, speedup, seconds, ...), then a summary
table on stderr; the caller exits non-zero if any model did not convert, after every other model is done.
"""
from __future__ import annotations

import dataclasses
import glob
import math
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from multiprocessing import connection
from typing import Callable, Optional, Sequence

from tensat_tf import errors
from tensat_tf import report as report_file
from tensat_tf.options import Options

OK, SKIPPED, FAILED, TIMEOUT, MEMORY, CRASHED = "ok", "skipped", "failed", "timeout", "memory", "crashed"
GOOD = (OK, SKIPPED)


@dataclasses.dataclass
class Job:
    name: str           # relative to the glob's fixed prefix (or the zoo name): also the output's path under the root
    src: str            # SavedModel folder or zoo:NAME
    output_dir: str
    report: str


def _fixed_prefix(pattern: str) -> str:
    """The folder part of a glob pattern before its first wildcard ('/m/*/1' -> '/m')."""
    parts = pattern.split(os.sep)
    fixed = []
    for part in parts[:-1]:
        if glob.has_magic(part):
            break
        fixed.append(part)
    if not fixed:
        return os.curdir
    return os.sep.join(fixed) if fixed != [""] else os.sep


def discover(patterns: Sequence[str], output_root: str) -> list[Job]:
    """Every folder the patterns match (files are ignored; a folder that is not a SavedModel fails in its worker, so
    it is reported rather than silently skipped), plus `zoo:NAME` entries."""
    jobs: list[Job] = []
    seen: dict[str, str] = {}
    for pattern in patterns:
        if pattern.startswith("zoo:"):
            found = [(pattern[4:], pattern)]
        else:
            pattern = os.path.expanduser(pattern)
            prefix = _fixed_prefix(pattern)
            found = []
            for path in sorted(glob.glob(pattern)):
                if os.path.isdir(path):
                    rel = os.path.relpath(path, prefix) if glob.has_magic(pattern) else os.path.basename(
                        os.path.abspath(path))
                    found.append((rel, path))
        for name, src in found:
            if name in seen:
                if seen[name] == src:
                    continue
                raise errors.BadInput(f"two inputs map to the same output name {name!r}: {seen[name]} and {src}")
            seen[name] = src
            out = os.path.join(output_root, name)
            jobs.append(Job(name, src, out, report_file.default_path(out)))
    if not jobs:
        raise errors.MissingPath("--input_glob matched no model folder: " + " ".join(patterns))
    return jobs


def finished(job: Job) -> bool:
    return os.path.isfile(os.path.join(job.output_dir, "saved_model.pb")) and os.path.isfile(job.report)


# -- figures from a report ---------------------------------------------------------------------------------------------
def speedups(report: dict) -> tuple[Optional[float], Optional[float]]:
    """(measured speedup of what was published, predicted speedup) from a convert report; None when unknown.

    Measured: the profile stage's latency ratio per signature (1.0 where it kept the original graph), geometric mean
    over the profiled signatures. Predicted: total cost-model cost before / after over all signatures, one call of
    each (cost.analytic.reported_gain)."""
    from tensat_tf.cost import analytic
    measured = []
    for sig in report.get("signatures", {}).values():
        prof = sig.get("profile") or {}
        if prof.get("speedup") is not None:
            measured.append(1.0 if prof.get("kept_original") else float(prof["speedup"]))
    speed = round(math.exp(sum(math.log(x) for x in measured) / len(measured)), 4) if measured else None
    predicted = analytic.reported_gain([sig.get("extraction") for sig in report.get("signatures", {}).values()])
    return speed, None if predicted is None else round(predicted, 4)


# -- the worker (runs in the spawned child) ----------------------------------------------------------------------------
def _worker(job: dict, options: dict, memory_mb: int, threads: int, verbosity: Optional[int], conn) -> None:
    """Convert one model with the parent's options (Options.to_json); send one result dict; exit without
    interpreter teardown."""
    try:
        os.setpgrp()            # the parent kills this process group: solver and profiling subprocesses too
    except OSError:
        pass
    if memory_mb:
        import resource
        limit = memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    t0 = time.perf_counter()
    try:
        result = _convert_one(job, options, threads, verbosity)
    except errors.TensatError as e:
        result = {"status": FAILED, "exit_code": e.exit_code, "error": str(e)}
    except MemoryError:
        result = {"status": MEMORY, "error": f"out of memory under the {memory_mb} MB limit (--model_memory_mb)"}
    except BaseException as e:  # noqa: BLE001 - one line per model, whatever went wrong
        first = (str(e).strip().splitlines() or [""])[0]
        status = MEMORY if memory_mb and _looks_like_memory(first) else FAILED
        result = {"status": status, "exit_code": errors.InternalError.exit_code,
                  "error": f"internal error: {type(e).__name__}: {first}"}
    result["seconds"] = round(time.perf_counter() - t0, 3)
    try:
        conn.send(result)
        conn.close()
    finally:
        os._exit(0)


def _looks_like_memory(message: str) -> bool:
    m = message.lower()
    return any(s in m for s in ("cannot allocate memory", "bad_alloc", "out of memory", "failed to map segment",
                                "resource_exhausted", "oom"))


def _convert_one(job: dict, options: dict, threads: int, verbosity: Optional[int]) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from absl import flags, logging
    # no command line here: marked parsed, absl logging handles records as in the parent instead of announcing
    # "Logging before flag parsing goes to stderr"
    flags.FLAGS.mark_as_parsed()
    logging.set_verbosity(logging.WARNING if verbosity is None else verbosity)
    import tensorflow as tf
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    from tensat_tf.convert import convert
    # an output without its report is a leftover of an interrupted run (see finished()): replace it
    report = convert(job["src"], job["output_dir"], dataclasses.replace(Options.from_json(options), overwrite=True))
    report_file.write(report, job["report"])
    speed, predicted = speedups(report)
    return {"status": OK, "speedup": speed, "predicted_speedup": predicted}


# -- the parent --------------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Running:
    job: Job
    proc: object
    conn: object
    t0: float


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    try:
        proc.kill()
    except (OSError, ValueError):
        pass
    proc.join(timeout=10)


def _line(job: Job, status: str, seconds: float, **extra) -> dict:
    line = {"model": job.name, "status": status, "speedup": extra.pop("speedup", None), "seconds": round(seconds, 3),
            "predicted_speedup": extra.pop("predicted_speedup", None), "output": job.output_dir}
    line.update({k: v for k, v in extra.items() if v is not None})
    return line


def _skipped(job: Job) -> dict:
    import json
    speed = predicted = None
    try:
        with open(job.report) as f:
            speed, predicted = speedups(json.load(f))
    except (OSError, ValueError):
        pass
    return _line(job, SKIPPED, 0.0, speedup=speed, predicted_speedup=predicted)


def run(jobs: Sequence[Job], options: Options, n_jobs: int = 1, timeout_s: Optional[float] = None,
        memory_mb: int = 0, on_result: Callable[[dict], None] = lambda line: None, progress=None,
        threads: Optional[int] = None, verbosity: Optional[int] = None) -> list[dict]:
    """Convert every job with `options` (checked by the caller; output_dir and overwrite are each job's, the warm-up
    requests are named after the output folder unless options.warmup_model_name says otherwise); finished ones are
    skipped. verbosity: the workers' absl logging verbosity (None: WARNING, TF's INFO chatter is not for users).
    -> one result dict per job, in job order."""
    options_data = options.to_json()      # what the workers get: plain data (progress, a callable, stays here)
    ctx = mp.get_context("spawn")
    n_jobs = max(1, n_jobs)
    if threads is None:
        threads = max(1, (os.cpu_count() or 1) // n_jobs)
    results: dict[str, dict] = {}
    todo: deque = deque()
    for job in jobs:
        if finished(job):
            results[job.name] = _skipped(job)
            on_result(results[job.name])
        else:
            todo.append(job)
    running: dict[str, _Running] = {}
    t_start = time.monotonic()

    def done(r: _Running, line: dict) -> None:
        running.pop(r.job.name, None)
        try:
            os.killpg(r.proc.pid, signal.SIGKILL)       # strays of the worker's group, if any
        except (ProcessLookupError, PermissionError, OSError):
            pass
        results[r.job.name] = line
        on_result(line)

    try:
        while todo or running:
            while todo and len(running) < n_jobs:
                job = todo.popleft()
                if os.path.dirname(job.output_dir):
                    os.makedirs(os.path.dirname(job.output_dir), exist_ok=True)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker, args=(dataclasses.asdict(job), options_data, memory_mb, threads,
                                                         verbosity, send),
                                   name=f"tensat_tf-batch[{job.name}]", daemon=False)
                proc.start()
                send.close()
                running[job.name] = _Running(job, proc, recv, time.monotonic())
            if progress is not None:
                n_done = len(results)
                bad = sum(1 for v in results.values() if v["status"] not in GOOD)
                now = time.monotonic()
                run_txt = ", ".join(f"{n} {now - r.t0:.0f}s" for n, r in running.items())
                progress.status(f"batch {n_done}/{len(jobs)} done" + (f" ({bad} failed)" if bad else "")
                                + f", {now - t_start:.0f} s | running: {run_txt}" + (f" | queued {len(todo)}"
                                                                                      if todo else ""))
            connection.wait([r.conn for r in running.values()] + [r.proc.sentinel for r in running.values()],
                            timeout=0.5)
            now = time.monotonic()
            for r in list(running.values()):
                msg = _poll(r.conn)
                if msg is None and not r.proc.is_alive():
                    r.proc.join(timeout=5)
                    msg = _poll(r.conn)
                    if msg is None:
                        code = r.proc.exitcode
                        why = (f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}")
                        hint = " (out of memory? see --model_memory_mb)" if code in (-signal.SIGKILL,
                                                                                     -signal.SIGSEGV,
                                                                                     -signal.SIGABRT) else ""
                        status = MEMORY if memory_mb and code == -signal.SIGABRT else CRASHED
                        done(r, _line(r.job, status, now - r.t0, error=f"worker died: {why}{hint}"))
                        continue
                if msg is not None:
                    r.proc.join(timeout=10)
                    if r.proc.is_alive():
                        _kill(r.proc)
                    seconds = msg.pop("seconds", now - r.t0)
                    done(r, _line(r.job, msg.pop("status"), now - r.t0, worker_seconds=seconds, **msg))
                elif timeout_s and now - r.t0 > timeout_s:
                    _kill(r.proc)
                    done(r, _line(r.job, TIMEOUT, now - r.t0,
                                  error=f"killed after {timeout_s:g} s (--model_timeout)"))
    finally:
        for r in list(running.values()):
            _kill(r.proc)
    return [results[j.name] for j in jobs]


def _poll(conn):
    try:
        if conn.poll():
            return conn.recv()
    except (EOFError, OSError):
        return None
    return None


def table(lines: Sequence[dict], seconds: float) -> str:
    """The summary: one row per model, then the counts."""
    def fmt(x):
        return "-" if x is None else f"{x:.3f}x"
    width = max([len("model")] + [len(v["model"]) for v in lines])
    rows = [f"{'model':<{width}}  {'status':<8} {'speedup':>9} {'predicted':>10} {'seconds':>8}  error"]
    for v in lines:
        rows.append(f"{v['model']:<{width}}  {v['status']:<8} {fmt(v.get('speedup')):>9} "
                    f"{fmt(v.get('predicted_speedup')):>10} {v['seconds']:>8.1f}  {v.get('error', '')[:100]}")
    counts = {}
    for v in lines:
        counts[v["status"]] = counts.get(v["status"], 0) + 1
    rows.append(f"{len(lines)} models in {seconds:.1f} s: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return "\n".join(rows)


def raise_if_failed(lines: Sequence[dict]) -> None:
    """After the table: the one-line error (exit code 40) naming every model that did not convert."""
    bad = [v for v in lines if v["status"] not in GOOD]
    if bad:
        raise errors.BatchFailed(f"{len(bad)} of {len(lines)} models did not convert: "
                                 + ", ".join(f"{v['model']} ({v['status']})" for v in bad))
