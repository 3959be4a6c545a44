"""Every built-in device profile x real models from packages, each cell built as a new user types it.

A cell is ``edgeopt convert MODEL --profile P --precision int8 --calib calib.npz --eval eval.npz
--max-accuracy-drop 2 --json`` through the CLI (a subprocess), with ``--search-budget`` (``--budget``) and
``--input-shape`` where the model has a dynamic dimension, and nothing else: no metric flag, no recipe.
Each cell records the exit code, the backend and precision written, the metric the run named and that metric
vs FP32 on held-back samples the run never saw (``validate_artifact`` on this host, the artifact's own
runtime), quantized vs float compute units in the artifact, its size, the seconds, and the reason when
there is no artifact. The models are ``bench/real_models.py``'s cases plus ``bench/matrix_cases.py``'s
(an LSTM speaker encoder, a byte classifier with int32 inputs, a GRU with int64 token ids).

    .venv/bin/python bench/device_matrix.py [--models a,b] [--profiles pi5,host] [--budget 60] [--out FILE]
        [--verify-on pi5-emu]    # ARM cells' artifacts also run on the emulated board (edgeopt emulate start pi5)
    .venv/bin/python bench/device_matrix.py --combine pi5.json host.json --out all.json   # runs merged into one
    .venv/bin/python bench/device_matrix.py --table all.json                              # the README table

Prints one JSON object (and writes it to ``--out``). Not a test: no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import matrix_cases  # noqa: E402
import matrix_unseen  # noqa: E402
import real_models  # noqa: E402

CASES = {**real_models.CASES, **matrix_cases.CASES, **matrix_unseen.CASES}
HELD_APART = tuple(matrix_unseen.HELD_APART)  # run only with --final: the final table, never while tuning
PROFILES = ("pi5", "rpi4", "jetson-orin-nano", "jetson-agx-orin", "intel-npu", "host")
BOUND = 2.0  # --max-accuracy-drop, points
HELD_BACK = 0.5  # of each case's eval samples, never given to the run


def _npz(ds, path: Path) -> Path:
    np.savez(path, **ds.arrays, **({"labels": ds.labels} if ds.labels is not None else {}))
    return path


def prepare(name: str, work: Path) -> dict:
    """The case's model and data files: calib.npz, eval.npz (what the run sees) and the held-back Dataset."""
    case = CASES[name](work)
    given, held = case.eval.split(HELD_BACK, seed=0)
    return {"case": case, "calib": _npz(case.calib, work / "calib.npz"), "eval": _npz(given, work / "eval.npz"),
            "held": held, "eval_samples": len(given)}


def command(prep: dict, profile: str, out: Path, budget: float, verify_on: str | None = None) -> list[str]:
    case = prep["case"]
    argv = [sys.executable, "-m", "edgeopt", "convert", str(case.model), "--profile", profile, "--precision", "int8",
            "--calib", str(prep["calib"]), "--eval", str(prep["eval"]), "--max-accuracy-drop", f"{BOUND:g}",
            "--search-budget", f"{budget:g}", "--json", "-o", str(out)]
    for inp, shape in case.shapes.items():
        argv += ["--input-shape", f"{inp}={'x'.join(map(str, shape))}"]
    if verify_on and _arch(profile) == "aarch64":  # an ARM artifact also runs on the (emulated) board's runtime
        argv += ["--verify-on", verify_on]
    return argv


def _arch(profile: str) -> str:
    from edgeopt.profiles import load_profile

    return load_profile(profile).arch


def run_cell(prep: dict, profile: str, work: Path, budget: float, timeout: float, verify_on: str | None) -> dict:
    out = work / f"art-{profile}"
    argv = command(prep, profile, out, budget, verify_on)
    cell: dict = {"model": prep["case"].name, "profile": profile,
                  "command": " ".join(["edgeopt", *argv[3:]]).replace(str(work) + "/", ""),
                  "load_1min_at_start": round(os.getloadavg()[0], 2)}  # this machine is shared: seconds are under load
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=work)
        cell["exit_code"] = proc.returncode
    except subprocess.TimeoutExpired:
        proc, cell["exit_code"] = None, None
        cell["reason"] = f"no result within {timeout:.0f} s (killed)"
    cell["seconds"] = round(time.perf_counter() - t0, 1)
    cell["load_1min_at_end"] = round(os.getloadavg()[0], 2)
    payload = _payload(proc.stdout) if proc is not None else {}
    if payload.get("verdict"):  # convert's result said plainly: "mostly float: …", "INT8 in name only: …"
        cell["verdict"] = payload["verdict"]
    if proc is not None and not payload.get("ok", False):
        err = payload.get("error") or {}
        tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        cell["reason"] = err.get("message", tail)[:1200] + (f" ({err['hint']})" if err.get("hint") else "")
        cell["error_kind"] = err.get("kind")
        details = err.get("details") or {}
        if details.get("cpu_ran_it_as"):  # judged here at another precision than the device's own hint (an NPU's f16)
            cell["judged_at"] = {"hint": details.get("judged_at_hint"), "cpu_ran_it_as": details["cpu_ran_it_as"]}
    if proc is not None:  # each backend left for the next, and why (also kept in the manifest when one holds)
        cell["backends_left"] = [ln.split("convert: ", 1)[-1][:600] for ln in proc.stderr.splitlines()
                                 if "could not hold this model" in ln]
    if out.is_dir() and (out / "manifest.json").is_file():
        cell.update(describe_artifact(out, prep))
    else:
        cell["artifact"] = None
    return cell


def _payload(stdout: str) -> dict:
    """The one JSON object ``--json`` prints on stdout (an exit 1 or a killed run may print none)."""
    try:
        obj = json.loads(stdout)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def describe_artifact(art: Path, prep: dict) -> dict:
    m = json.loads((art / "manifest.json").read_text())
    v = m.get("validation") or {}
    row = {"artifact": True, "backend": m["backend"], "precision": m["precision"],
           "precision_fallback": m.get("precision_fallback"),  # INT8 asked, none held: {requested, reason, ...}
           "backend_fallback": [{k: b.get(k) for k in ("backend", "reason", "exit_code") if k in b}
                                for b in m.get("backend_fallback") or []],
           "artifact_bytes": sum(p.stat().st_size for p in art.rglob("*") if p.is_file()),
           "units": count_units(art, m), "verified_on": m.get("verified_on"),
           "run_metric": {k: v.get(k) for k in ("metric", "metric_unit", "metric_basis", "metric_reference",
                                                "metric_value", "metric_drop", "samples", "data_source",
                                                "metric_kind", "sample_points")}}
    cc = m.get("consumer_check") or {}  # the artifact through its runtime's plain API, at convert time
    row["consumer_check"] = {"passed": cc.get("passed"), "samples": cc.get("samples"), "skipped": cc.get("skipped"),
                             "max_abs_diff": (cc.get("with_settings") or {}).get("max_abs_diff"),
                             "plain_default": bool(cc.get("plain_default")),
                             "on_devices": [d.get("where") for d in cc.get("on_devices") or []]}
    row["gate"] = gate_bound(v)
    row["held_back"] = held_back_metric(art, prep, v.get("metric_kind"))
    return row


def gate_bound(validation: dict) -> dict:
    """How the run's gate judged the written artifact: its drop on the run's eval samples and the drop's upper
    confidence limit (``drop_upper`` at ``confidence``; None where the gate had no confidence bound, e.g. a user's
    metric without per-sample scores). A float written in INT8's stead is judged by this gate too."""
    return {"drop": validation.get("metric_drop"), "drop_upper": validation.get("drop_upper"),
            "confidence": validation.get("confidence"), "samples": validation.get("samples")}


def held_back_metric(art: Path, prep: dict, run_kind: str | None = None) -> dict:
    """The artifact vs FP32 (the source model in ONNX Runtime) on samples the run never saw, on this host's copy of
    the artifact's runtime, with the metric the run judged by (``run_kind``, the manifest's ``metric_kind``);
    ``within_bound``: the drop measured there is within the bound (no room kept: this is the check, not a choice).
    When the metric chosen on these samples alone is another kind (a borderline choice: the recogniser's blank
    share is 0.47 on one set and 0.53 on another), that one's figures are kept too, under ``chosen_here``."""
    from edgeopt.metrics import MetricSpec
    from edgeopt.validate import validate_artifact

    held = prep["held"]

    def judged(kind: str | None) -> dict:
        spec = MetricSpec(name=kind) if kind and kind != "custom" else None
        v = validate_artifact(art, prep["case"].model, held, data_source="held-back", threads=2, metric=spec)
        return {"metric": v.metric, "kind": v.metric_kind, "unit": v.metric_unit, "fp32": v.metric_reference,
                "artifact": v.metric_value, "drop": v.metric_drop, "within_bound": v.metric_drop <= BOUND,
                "samples": len(held), "on": "held-back samples never given to the run"}

    try:
        row = judged(run_kind)
        if run_kind:
            auto = judged(None)
            if auto["kind"] != row["kind"]:
                row["chosen_here"] = auto
    except Exception as err:  # noqa: BLE001 - a runtime that can't run here (an NPU) is said, not fatal
        return {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    return row


def count_units(art: Path, manifest: dict) -> dict:
    """Compute units (convolutions, matmuls, recurrent layers) quantized vs left in float, read from the
    artifact's own model file by edgeopt's one count (``edgeopt/quant_units.py``, what the int8 gate reads)."""
    from edgeopt.quant_units import count_units as edgeopt_count

    found = edgeopt_count(art, manifest["runtime"])
    if found is None:
        return {"error": f"no unit count for {manifest['runtime'].get('model')}"}
    return {"quantized": found["quantized"], "float": found["float"],
            "counted": "edgeopt.quant_units: integer ops, or 8-bit weights through a dequantize, every subgraph"}


def environment() -> dict:
    from edgeopt.converters.registry import distributions
    from edgeopt.deps import version_of
    from edgeopt.runtime import environment as env

    e = env.collect(libraries=distributions())
    e.pop("_cpu_counters_before", None)
    dists = ("edgeopt", "onnx", "onnxruntime", "openvino", "nncf", "ai-edge-litert", "tensorflow", "onnx2tf",
             "ai-edge-quantizer", "torch", "numpy")
    return {"machine": e, "versions": {d: version_of(d) for d in dists}, "edgeopt_commit": _commit()}


def _commit() -> str | None:
    """The checkout's commit (and '+dirty' with uncommitted changes): what code the cells ran."""
    try:
        git = ["git", "-C", str(HERE.parent)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def table(result: dict) -> str:
    """The README table of a run's JSON: one row a cell. "written" is the backend and the precision the
    artifact has (marked "fallback" when INT8 was asked and a float precision was written because no INT8
    held); "board check" is the --verify-on result (device, largest difference vs its tolerance)."""
    rows = ["| model | profile | exit | written | metric (held-back): FP32 -> artifact | INT8 / float units | "
            "board check | size | s | why no artifact |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in result["cells"]:
        hb, units = c.get("held_back") or {}, c.get("units") or {}
        metric = f"{hb['metric']}: {hb['fp32']:.4g} -> {hb['artifact']:.4g} {hb['unit']}" if "metric" in hb else \
            hb.get("error", "")
        if "metric" in hb and not hb.get("within_bound", True):
            metric += " (outside the bound)"
        other = hb.get("chosen_here")
        if other:  # the kind these samples alone would have picked: its figure too
            metric += f"; {other['metric']}: {other['fp32']:.4g} -> {other['artifact']:.4g} {other['unit']}"
        why = (c.get("reason") or "").replace("|", "/")[:150] if not c.get("artifact") else ""
        judged = c.get("judged_at")
        if why and judged:  # an NPU cell judged here at another precision than the NPU's: said in the row too
            why += f" … judged at the {judged['hint']} hint, which this CPU ran as {judged['cpu_ran_it_as']}"
        size = f"{c['artifact_bytes'] / 1e6:.2f} MB" if c.get("artifact_bytes") else "-"
        q = f"{units['quantized']} / {units['float']}" if "quantized" in units else "-"
        rows.append(f"| {c['model']} | {c['profile']} | {c['exit_code']} | {written(c)} | {metric} | {q} | "
                    f"{board_check(c, result.get('verify_on'))} | {size} | {c['seconds']:.0f} | {why} |")
    return "\n".join(rows)


def written(cell: dict) -> str:
    """What the artifact is: backend and precision, with a float written in INT8's stead marked as such."""
    if not cell.get("artifact"):
        return "-"
    text = f"{cell['backend']} {cell['precision']}"
    fb = cell.get("precision_fallback")
    if fb:
        gate = cell.get("gate") or {}
        upper, conf = gate.get("drop_upper"), gate.get("confidence")
        judged = (f"; drop up to {upper:.2f} at {conf:.3g} confidence" if upper is not None and conf is not None
                  else "; no confidence bound on the drop")
        text += (f" (fallback: the last {fb.get('requested', 'int8')} built did not run on the board{judged})"
                 if fb.get("exit_code") == 6 else f" (fallback: {fb.get('requested', 'int8')} held on no mode{judged})")
    verdict = cell.get("verdict")
    if verdict:  # convert's own result line: an INT8 that is mostly float says so in the table too
        text += f" ({verdict.split(':', 1)[0]})"
    return text


def board_check(cell: dict, verify_on: str | None) -> str:
    """The emulated/real board's run of the artifact vs this host's: passed with its largest difference, or why not."""
    v = cell.get("verified_on")
    if v:
        mark = "ok" if v.get("passed") else "MISMATCH"
        diff, tol = v.get("max_abs_diff"), v.get("tolerance")
        figures = f" ({diff:.2g} <= {tol:.2g})" if diff is not None and tol is not None and v.get("passed") else ""
        e = v.get("error_vs_fp32")
        if e and v.get("passed"):  # beyond the rounding tolerance, as far from FP32 as this host's run
            figures = f" (as accurate: error vs FP32 {e['board']:.3g} there, {e['here']:.3g} here)"
        return f"{v['device']} {mark}{figures}"
    if verify_on and "--verify-on" in cell.get("command", ""):
        if cell.get("exit_code") == 6:  # the board could not run the artifact (or was not reached): nothing written
            return "did not run there (exit 6)"
        return "mismatch (exit 5)" if "--verify-on" in (cell.get("reason") or "") else "not run (no artifact)"
    return "-"


def combine(parts: list[dict]) -> dict:
    """One matrix from several runs (e.g. one profile per invocation): the cells of all, in order, each with the
    index of its run; a cell rerun later (same model and profile) replaces the earlier one, which is kept under
    ``superseded``; each run's environment, versions, commit, options and loads under ``runs`` (and the first
    run's at the top)."""
    first = parts[0]
    out = {k: first[k] for k in ("bench", "bound_points", "search_budget_s", "threads", "verify_on",
                                 "held_back_fraction", "machine", "versions") if k in first}
    out["edgeopt_commit"] = sorted({str(x) for p in parts for x in _as_list(p.get("edgeopt_commit") or "?")})
    out["runs"], offsets = [], []
    for p in parts:  # a part that is itself a combination brings its runs (and its cells' run numbers) along
        offsets.append(len(out["runs"]))
        out["runs"] += p["runs"] if "runs" in p and "superseded" in p else [_run_summary(p)]
    out["cases"] = {}
    for p in parts:
        out["cases"].update(p.get("cases") or {})
    out["cells"], out["superseded"] = [], [s for p in parts for s in p.get("superseded") or []]
    for offset, p in zip(offsets, parts, strict=True):  # a later run's cell replaces an earlier one (same model, profile)
        for c in p["cells"]:
            c = {**c, "run": offset + (c.get("run", 0) if "superseded" in p else 0)}
            same = next((i for i, o in enumerate(out["cells"]) if (o["model"], o["profile"]) == (c["model"], c["profile"])),
                        None)
            if same is None:
                out["cells"].append(c)
            else:
                out["superseded"].append(out["cells"][same])
                out["cells"][same] = c
    return out


def _as_list(x) -> list:
    return x if isinstance(x, list) else [x]


def _run_summary(p: dict) -> dict:
    return {"profiles": sorted({c["profile"] for c in p["cells"]}), "cells": len(p["cells"]),
            **{k: p.get(k) for k in ("search_budget_s", "verify_on", "edgeopt_commit", "versions")},
            "load_before": (p.get("machine") or {}).get("load_before"),
            "load_after": (p.get("environment_after") or {}).get("load_before")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(m for m in CASES if m not in HELD_APART),
                    help=f"of: {', '.join(CASES)} (default: all but the held-apart {', '.join(HELD_APART)})")
    ap.add_argument("--final", action="store_true", help="the final table: the held-apart models may run")
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--budget", type=float, default=120.0, help="--search-budget of each cell (seconds)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before a cell is killed (default 6x budget + 300)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--table", type=Path, help="print the markdown table of an earlier run's JSON and stop")
    ap.add_argument("--combine", type=Path, nargs="+", help="merge earlier runs' JSON files into one (--out) and stop")
    ap.add_argument("--verify-on", help="a device (e.g. pi5-emu, after 'edgeopt emulate start pi5') every aarch64 "
                    "cell's artifact is also run on (convert --verify-on), compared with this host's run")
    args = ap.parse_args()
    if args.combine:
        merged = combine([json.loads(f.read_text()) for f in args.combine])
        if args.out:
            _write(args.out, merged)
        print(json.dumps(merged, default=str))
        return
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    models, profiles = args.models.split(","), args.profiles.split(",")
    unknown = [m for m in models if m not in CASES]
    if unknown:
        ap.error(f"unknown model {unknown[0]!r}; known: {', '.join(CASES)}")
    if not args.final and (apart := [m for m in models if m in HELD_APART]):
        ap.error(f"{apart[0]!r} is held apart for the final table: add --final for that run only")
    timeout = args.timeout or 6 * args.budget + 300
    out = {"bench": "device_matrix", "bound_points": BOUND, "search_budget_s": args.budget, "threads": "default",
           "verify_on": args.verify_on, "final": args.final,
           "held_apart": [m for m in models if m in HELD_APART],
           "held_back_fraction": HELD_BACK, **environment(), "cells": [], "cases": {}}
    with tempfile.TemporaryDirectory(prefix="edgeopt-matrix-") as tmp:
        for name in models:
            work = Path(tmp) / name
            work.mkdir()
            try:
                prep = prepare(name, work)
            except Exception as err:  # noqa: BLE001 - a model that can't be prepared is said, the rest run
                out["cases"][name] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-1200:]}
                continue
            c = prep["case"]
            out["cases"][name] = {"kind": c.kind, "source": c.model.name, "data": c.data, "calib_samples": len(c.calib),
                                  "eval_samples": prep["eval_samples"], "held_back_samples": len(prep["held"])}
            for profile in profiles:
                cell = run_cell(prep, profile, work, args.budget, timeout, args.verify_on)
                out["cells"].append(cell)
                print(f"{name} x {profile}: exit {cell['exit_code']} {cell.get('backend', '')} "
                      f"{cell.get('precision', '')} {cell.get('reason', '')[:160]}", file=sys.stderr, flush=True)
                if args.out:  # what is done so far survives a cell that never ends
                    _write(args.out, out)
    out["environment_after"] = environment()["machine"]
    if args.out:
        _write(args.out, out)
    print(json.dumps(out, default=str))


def _write(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
