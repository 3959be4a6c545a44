"""Markdown tables of the benchmark JSON in bench/results/, one renderer per benchmark kind
(``bench/docs_tables.py`` puts them into the docs pages). Each renderer takes ``[(path, data), ...]``."""
from __future__ import annotations

import re
from pathlib import PurePosixPath

ISA_NAMES = (("avx2", "AVX2"), ("avx512_vnni", "AVX-512 VNNI"), ("avx512_bf16", "AVX512-BF16"),
             ("amx_int8", "AMX"))
LIBRARIES = ("onnxruntime", "openvino", "nncf", "ai-edge-litert", "ai-edge-quantizer", "onnx2tf", "tensorflow",
             "torch", "numpy")
BACKEND_NAMES = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO", "tflite": "TFLite", "tvm": "TVM"}


def _cpu(cpu: dict | str | None) -> str:
    if not cpu:
        return "CPU model not recorded"
    if isinstance(cpu, str):  # bench/consumer_parity.py: the model name alone
        return cpu
    isa = [name for flag, name in ISA_NAMES if flag in cpu.get("isa", [])]
    return f"{cpu.get('model', '?')} ({', '.join(isa) or 'no AVX2'}), {cpu.get('logical_cpus', '?')} logical CPUs"


def _loads(data: dict) -> list[float]:
    """Every 1-minute load average the JSON recorded (before/after runs, cells or models)."""
    found: list[float] = []

    def walk(x, key=""):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, k)
        elif isinstance(x, list):
            if key in ("load_before", "load_after", "before", "after") and x and isinstance(x[0], (int, float)):
                found.append(float(x[0]))
            else:
                for v in x:
                    walk(v, key)
        elif key == "load_avg_1m" and isinstance(x, (int, float)):
            found.append(float(x))
    walk(data)
    return found


def environment(path: str, data: dict) -> str:
    """One line: the JSON file, its date, the CPU, threads, load and library versions it recorded."""
    env = data.get("machine") or data.get("environment") or {}
    versions = dict(env.get("libraries") or {})
    versions.update(data.get("versions") or {})
    versions.update(env.get("versions") or {})
    versions.update({k: v for k, v in env.items() if k in LIBRARIES})
    threads = data.get("threads") or env.get("latency_threads") or \
        sorted({m.get("threads") for m in data.get("models", []) if isinstance(m, dict) and m.get("threads")})
    threads = ", ".join(map(str, threads)) if isinstance(threads, list) else threads
    loads = _loads(data)
    load = f"load average {min(loads):.1f}-{max(loads):.1f}" if loads else "load not recorded"
    date = re.search(r"\d{4}-\d{2}-\d{2}", path)
    cpu = _cpu(env.get("cpu")) if "cpu" in env else f"{env.get('machine', '?')}, {env.get('cpus', '?')} CPUs"
    cpu += "".join(f", {name} {'yes' if env[flag] else 'no'}" for flag, name in (("avx512_bf16", "AVX512-BF16"),
                                                                               ("amx_bf16", "AMX")) if flag in env)
    libs = ", ".join(f"{k} {versions[k]}" for k in LIBRARIES if k in versions)
    return f"`{path}` ({date.group(0) if date else '?'}): " \
           f"{cpu}; threads {threads or 'default'}; {load}; {libs}"


# ---------------------------------------------------------------------------------------------- device matrix
def _held(c: dict) -> str:
    hb = c.get("held_back") or {}
    if "metric" not in hb:
        return hb.get("error", "")
    text = f"{hb['metric']}: {hb['fp32']:.4g} -> {hb['artifact']:.4g} {hb['unit']}"
    return text + ("" if hb.get("within_bound", True) else " (outside the bound)")


def _board(c: dict) -> str:
    v = c.get("verified_on")
    if not v:
        return "-"
    if not v.get("passed"):
        return f"{v['device']} mismatch"
    e = v.get("error_vs_fp32")
    if e:
        return f"{v['device']} ok (as accurate as here: error vs FP32 {e['board']:.3g} / {e['here']:.3g})"
    l2 = next((o["relative_l2"] for o in (v.get("outputs") or {}).values() if o.get("relative_l2") is not None), None)
    if l2 is not None and v["max_abs_diff"] > v["tolerance"]:
        return f"{v['device']} ok (the whole output within {l2:.2g} relative L2; one element {v['max_abs_diff']:.2g})"
    return f"{v['device']} ok ({v['max_abs_diff']:.2g} <= {v['tolerance']:.2g})"


def _written(c: dict) -> str:
    if not c.get("artifact"):
        return "-"
    fb = c.get("precision_fallback") or {}
    why = "" if not fb else " (float fallback: the last INT8 built did not run on the board)" if fb.get(
        "exit_code") == 6 else " (float fallback)"
    return f"{c['backend']} {c['precision']}{why}"


def _why(c: dict) -> str:
    if c.get("artifact"):
        return ""
    reason = (c.get("reason") or "").replace("|", "/")
    best = re.search(r"best (\S+ [\d.]+ %) vs FP32 ([\d.]+ %)", reason)
    why = reason.split(": best ")[0][:90] + (f": best {best.group(1)} vs FP32 {best.group(2)}" if best else "")
    judged = c.get("judged_at")
    return why + (f" (judged at the {judged['hint']} hint, run as {judged['cpu_ran_it_as']} on this CPU)"
                  if judged else "")


def _cases(data: dict) -> str:
    return "\n".join(f"- **{k}**: {v.get('kind', '')}; data: {v.get('data', '?')}"
                     for k, v in data.get("cases", {}).items())


def device_matrix(docs: list[tuple[str, dict]]) -> str:
    """Every cell: what `convert --profile P --precision int8` wrote, judged on held-back samples."""
    (_, data), = docs
    rows = ["| model | profile | exit | written | metric on held-back samples: FP32 -> artifact | "
            "INT8 / float units | board check | size | s | why no artifact |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in data["cells"]:
        u = c.get("units") or {}
        units = f"{u['quantized']} / {u['float']}" if "quantized" in u else "-"
        size = f"{c['artifact_bytes'] / 1e6:.2f} MB" if c.get("artifact_bytes") else "-"
        rows.append(f"| {c['model']} | {c['profile']} | {c['exit_code']} | {_written(c)} | {_held(c)} | {units} | "
                    f"{_board(c)} | {size} | {c['seconds']:.0f} | {_why(c)} |")
    return "\n".join(rows) + f"\n\nBound: {data['bound_points']:g} points; search budget " \
        f"{data['search_budget_s']:g} s. The models and their data (none human-labelled):\n\n{_cases(data)}"


def device_summary(docs: list[tuple[str, dict]]) -> str:
    """Per profile: how many models got INT8, float where INT8 could not hold, exit 5, within the bound on held-back
    data, checked on a board."""
    (_, data), = docs
    rows = ["| profile | models | INT8 written | float written (INT8 did not hold) | refused (exit 5) | within the "
            "bound on held-back samples | passed on the emulated board | backends written |", "|---|---|---|---|---|---|---|---|"]
    profiles: dict[str, list[dict]] = {}
    for c in data["cells"]:
        profiles.setdefault(c["profile"], []).append(c)
    for profile, cells in profiles.items():
        written = [c for c in cells if c.get("artifact")]
        int8 = [c for c in written if c.get("precision") == "int8"]
        refused = [c for c in cells if c.get("exit_code") == 5]
        within = [c for c in written if (c.get("held_back") or {}).get("within_bound")]
        checked = [c for c in written if (c.get("verified_on") or {}).get("passed")]
        backends: dict[str, int] = {}
        for c in written:
            backends[c["backend"]] = backends.get(c["backend"], 0) + 1
        board = f"{len(checked)} of {len(written)}" if any(c.get("verified_on") for c in cells) else "- (x86)"
        said = ", ".join(f"{BACKEND_NAMES.get(b, b)} {n}" for b, n in sorted(backends.items()))
        rows.append(f"| {profile} | {len(cells)} | {len(int8)} | {len(written) - len(int8)} | {len(refused)} | "
                    f"{len(within)} of {len(written)} | {board} | {said} |")
    return "\n".join(rows) + f"\n\nEach cell is `edgeopt convert MODEL --profile P --precision int8 --max-accuracy-drop " \
        f"{data['bound_points']:g}` on a real model from a pip package, with rendered, synthetic or " \
        "label-by-construction data (none human-labelled); exit 5 is a refusal that says why (INT8 misses the bound " \
        "and no float fallback holds either, or the eval set is too small to confirm it)."


# ---------------------------------------------------------------------------------------------- quant modes
def _mode(r: dict) -> str:
    mode = r["mode"].replace("fp32 (f32 hint)", "FP32 (f32 hint)").replace("fp32", "FP32")
    if r.get("chosen_by_convert"):
        return f"**{mode.removeprefix('chosen by convert: ')}** (convert's choice)"
    return mode


def _qm_cells(r: dict) -> list[str]:
    if "error" in r:
        return [f"failed to build: {r['error'].splitlines()[-1][:100]}", "–", "–", "–"]
    over = "" if r["within_bound"] else ", over"
    drop = "" if "fp32" in r["mode"] and r["backend"] == "onnxruntime" else f" ({r['drop']:g}{over})"
    return [f"{r['metric_unseen']:g}{drop}", f"{r['p50_ms']:.3g}", f"{r['x_vs_ort_fp32']:.2f}",
            f"{r['quantized_units']} / {r['float_units']}"]


def quant_modes(docs: list[tuple[str, dict]]) -> str:
    """Every INT8 mode x backend, bf16, and the modes convert chose (bold), against ONNX Runtime FP32."""
    lines = ["| model | backend | mode | metric on unseen data (drop) | p50 ms | × ORT FP32 | ops 8-bit / float |",
             "|---|---|---|---|---|---|---|"]
    data_lines = []
    for _, data in docs:
        for m in data["models"]:
            first = f"{m['model']} ({m['samples']['unseen']} unseen, bound {m['bound_points']:g})"
            for r in m["rows"]:
                lines.append(f"| {first} | {BACKEND_NAMES[r['backend']]} | {_mode(r)} | " + " | ".join(_qm_cells(r))
                             + " |")
                first = ""
            data_lines.append(f"- **{m['model']}**: {m['data']}; metric: {m['metric']}")
    return "\n".join(lines) + "\n\nData and metric per model:\n\n" + "\n".join(data_lines)


# ---------------------------------------------------------------------------------------------- backend auto
def backend_auto(docs: list[tuple[str, dict]]) -> str:
    """What `convert --backend auto` built with each backend, and which it wrote."""
    lines = ["| JSON | model | backend | written | metric drop | 8-bit / float units | × ORT FP32 | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for path, data in docs:
        name = PurePosixPath(path).name
        for run in data["runs"]:
            for b in run.get("backend_search", []):
                u = b.get("units") or {}
                units = f"{u['quantized']} / {u['float']}" if u else "–"
                drop = f"{b['metric_drop']:.2f}" if "metric_drop" in b else "–"
                speedup = b.get("speedup_vs_reference", b.get("speedup_vs_onnxruntime_fp32"))  # its earlier name
                x = f"{speedup:.2f}" if speedup is not None else "–"
                written = b.get("precision") or f"exit {b.get('exit_code', '?')}"
                why = b["verdict"] if b["verdict"] == "chosen" else f"{b['verdict']}: {b.get('why', '')[:80]}"
                lines.append(f"| `{name}` | {run['model']} | {BACKEND_NAMES.get(b['backend'], b['backend'])} | "
                             f"{written} | {drop} | {units} | {x} | {why.replace('|', '/')} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- pruning
def prune_recover(docs: list[tuple[str, dict]]) -> str:
    """Channel pruning with distillation recovery: FLOPs cut, top-1 at each step, and latency."""
    lines = ["| model | ratio | kept whole | FLOPs cut | top-1 FP32 | pruned | pruned + recovered (drop) | + INT8 | "
             "p50 ms FP32 / recovered / + INT8 | speed-up | recovery |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for _, data in docs:
        for name, m in data["models"].items():
            notes.append(f"- **{name}**: {m['model']}; {m['test_samples']} test samples; recovery data "
                         f"{m['recovery_data'].lower()}")
            for ratio, r in m["ratios"].items():
                a, lat, rec = r["accuracy_pct"], r["latency"], r["recovery"]
                p50 = " / ".join(f"{lat[k]['p50_ms']:.3g}" for k in ("fp32", "pruned_recovered", "pruned_recovered_int8"))
                secs = r["recovery_seconds"]["training_seconds"]
                lines.append(f"| {name} | {ratio} | {', '.join(r.get('skip') or []) or '-'} | {r['flops_cut_pct']} % | "
                             f"{a['fp32']:.2f} % | {a['pruned']:.2f} % | {a['recovered']:.2f} % "
                             f"(−{r['drop_after_recovery_pts']:.2f}) | {a['recovered_int8']:.2f} % | {p50} | "
                             f"×{r['speedup_p50']:.2f} | {secs:.0f} s, {rec['epochs']} epochs (best {rec['best_epoch']}), "
                             f"{rec['stopped']} |")
    return "\n".join(lines) + "\n\n" + "\n".join(notes)


# ---------------------------------------------------------------------------------------------- real models
def _real_rows(docs: list[tuple[str, dict]]) -> list[dict]:
    """Each model's newest row: a later file's row replaces an earlier one's (an earlier error, say)."""
    rows: dict[str, dict] = {}
    for _, data in docs:
        for m in data["models"]:
            if "error" not in m or m["model"] not in rows:
                rows[m["model"]] = m
    return list(rows.values())


def real_models(docs: list[tuple[str, dict]]) -> str:
    """FP32, naive INT8 (NNCF's defaults) and edgeopt's searched INT8 on the host profile, held-back metric."""
    lines = ["| model | metric (held-back samples) | bound | FP32 | naive INT8 | edgeopt INT8 | p50 ms FP32 / naive / "
             "edgeopt | × FP32 naive / edgeopt | kept in float | result |", "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for m in _real_rows(docs):
        if "error" in m:
            lines.append(f"| {m['model']} | – | – | – | – | – | – | – | – | not run: {m['error'][:80]} |")
            continue
        me, lat, x = m["metric"], m["latency"], m["speedup_vs_fp32_p50"]
        n = me["on"].split()[0]
        mine = f"{me['int8_edgeopt']:.4g} %" if "int8_edgeopt" in me else "within the bound"
        p50 = " / ".join(f"{lat[k]['p50_ms']:.3g}" if lat.get(k) else "–" for k in ("fp32", "int8_naive", "int8_edgeopt"))
        speed = " / ".join(f"{x[k]:.2f}" if k in x else "–" for k in ("int8_naive", "int8_edgeopt"))
        ranked = m['search']['quantized_ops_ranked']
        kept = f"{m['search']['kept_in_float_count']}" + (f" of {ranked}" if ranked else "")
        result = m["verdict"].split(" (use ")[0].replace("|", "/")
        lines.append(f"| {m['model']} | {me['name']} ({n}) | {m['bound']:g} | {me['fp32']:.4g} % | "
                     f"{me['int8_naive']:.4g} % | {mine} | {p50} | {speed} | {kept} | {result} |")
        notes.append(f"- **{m['model']}**: {m['kind']}; data: {m['data']}")
    return "\n".join(lines) + "\n\n" + "\n".join(notes)


# ---------------------------------------------------------------------------------------------- memory fit
RUNTIME_NAMES = {**BACKEND_NAMES, "tflite": "LiteRT", "tflite-micro": "TFLite Micro (INT8)"}


def _mb(n: int | None) -> str:
    return "–" if n is None else f"{n / 1e6:.2f}"


INT8_KINDS = {"onnxruntime": "INT8 QDQ", "openvino": "INT8 NNCF", "tflite": "INT8 full integer"}


def _memory_row(r: dict) -> str:
    name, runtime = r["model"], RUNTIME_NAMES.get(r["backend"], r["backend"])
    if r.get("precision") == "int8":
        runtime += f" ({INT8_KINDS.get(r['backend'], 'INT8')})"
    if "error" in r:
        return f"| {name} | {runtime} | – | not built: {r['error'][:90].replace('|', '/')} | – | |"
    p, m = r["predicted"], r["measured"]
    err = f"{r['error_pct']:+.1f} %" if "error_pct" in r else "–"
    if r["backend"] == "tflite-micro":
        return (f"| {name} | {runtime} | {p['total_bytes']:,} B (arena {p['arena_bytes']:,} / TFLM "
                f"{p['runtime_bytes']:,}) | {m['total_bytes']:,} B (plan {m['head_bytes']:,} / persistent "
                f"{m['tail_bytes']:,}) | {err} | |")
    if "peak_bytes" not in m:
        return f"| {name} | {runtime} | – | not measured: {m.get('error', '?')[:90]} | – | |"
    base = p["runtime_bytes"] - p.get("runtime_copies_bytes", 0)
    copies = f" + copies {_mb(p['runtime_copies_bytes'])}" if p.get("runtime_copies_bytes") else ""
    fitted = " (fitted on)" if r.get("fitted_on") else ""
    miss = r.get("miss") or {}
    why = f"{miss.get('part')}: {miss.get('why')}" if miss else ""
    return (f"| {name} | {runtime} | {_mb(p['total_bytes'])} ({_mb(p['weights_bytes'])} / {_mb(p['arena_bytes'])} / "
            f"{_mb(base)}{copies}) | {_mb(m['peak_bytes'])} ({_mb(m['load_bytes'])}) | {err}{fitted} | {why} |")


def memory_fit(docs: list[tuple[str, dict]]) -> str:
    """Predicted vs measured peak memory per model and runtime (MB, powers of 1000), and where a row misses."""
    lines = ["| model | runtime | predicted MB (weights / arena / runtime base + weight copies) | measured peak MB "
             "(load) | error | where it misses, and why |", "|---|---|---|---|---|---|"]
    for _, data in docs:
        lines.extend(_memory_row(r) for r in data["rows"])
    return "\n".join(lines)
