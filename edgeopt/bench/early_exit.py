"""``bench`` on an early-exit artifact: its latency depends on the inputs (how many leave early), so with
``--inputs`` it is measured over every sample of that file: the mean, each exit's share and latency, and the
worst case (every stage and every head), said when it is slower than the plain model."""

from __future__ import annotations

from pathlib import Path

MAX_SAMPLES = 500  # samples of --inputs timed (the first ones)


def cascade_figures(x: dict, inputs: str | None) -> dict:
    """The early-exit figures of one artifact (``x`` as bench opened it); without ``inputs`` only what
    ``cascade.json`` recorded at convert time, labelled so. With ``inputs``, each sample is timed on the cascade
    and on the model without exits kept in ``plain/`` (alternately, in this process, as convert measured them);
    where ``plain/`` is gone the mean is compared with the plain time recorded at convert, labelled so."""
    from edgeopt.runtime.cascade import PLAIN_DIR, open_plain, read_cascade, time_over_inputs
    from edgeopt.runtime.measure import npz_samples
    from edgeopt.runtime.runners import open_runner

    cascade = read_cascade(x["path"])
    plain, timed_with = _plain_at_convert(cascade)
    out = {"stages": len(cascade["stages"]), "exit_shares_at_convert": cascade.get("exit_shares_at_convert"),
           "plain_ms_at_convert": plain, "plain_timed_with": timed_with}
    if (m := cascade.get("measured_at_convert")) and m.get("ratio"):
        out["mean_vs_plain_at_convert"] = m["ratio"]
    if not inputs:
        out["note"] = "give --inputs (samples like the real ones) to measure the mean over them: the timings " \
                      "above repeat one input, which leaves at one exit"
        return out
    n = min(npz_samples(x["manifest"]["inputs"], inputs), MAX_SAMPLES)
    samples = feeds_of_npz(x["manifest"]["inputs"], inputs, n)
    threads = getattr(x["runner"], "threads", None)
    beside = open_plain(x["path"], open_runner, threads=threads)
    try:
        out.update(time_over_inputs(x["runner"], samples, plain=beside))
    finally:
        if beside is not None:
            beside.close()
    out["inputs"] = Path(inputs).name
    if beside is not None:
        plain = out["plain_mean_ms"]
        timed_with = (f"the model without exits in {PLAIN_DIR}/ ({cascade['plain']['runtime'].get('backend')}), "
                      f"each sample timed right after the cascade, {threads or 'default'} thread(s), this host")
        out["plain_timed_with"] = timed_with
    elif plain:
        out["mean_vs_plain"] = round(out["mean_ms"] / plain, 3)
        out.setdefault("warnings", []).append(
            f"early exit: no {PLAIN_DIR}/ beside the stages: the mean is compared with the plain model's time "
            f"recorded at convert ({timed_with}), in another process; rebuild to time both here")
    if plain:
        out["worst_case_vs_plain"] = round(out["worst_case_ms"] / plain, 3)
        if out["worst_case_ms"] > plain:
            msg = (f"early exit: the worst case ({out['worst_case_ms']:.3f} ms: every stage and every head) is "
                   f"slower than the plain model ({plain:.3f} ms, {timed_with})")
            out["worst_case_slower_than_plain"] = True
            out.setdefault("warnings", []).append(msg)
    return out


def _plain_at_convert(cascade: dict) -> tuple[float | None, str | None]:
    """The plain model's time recorded at convert, and how it was timed: the backend's own plain model in its
    runtime where convert measured it (``measured_at_convert``), else the ONNX Runtime time the stages were placed
    with (a LiteRT or OpenVINO cascade against ONNX Runtime's plain time would compare two runtimes)."""
    measured = cascade.get("measured_at_convert") or {}
    if measured.get("plain_ms"):
        return measured["plain_ms"], f"the backend's plain model at convert: {measured.get('timed_with')}"
    return cascade.get("plain_ms_at_convert"), cascade.get("timed_with")


def feeds_of_npz(specs: list[dict], npz_path: str, n: int) -> list[dict]:
    """The first ``n`` feeds of ``npz_path`` (read once), each batch as the model's first dimension says."""
    import numpy as np

    data = np.load(npz_path)
    arrays = {s["name"]: data[s["name"]] for s in specs}
    out = []
    for i in range(n):
        feeds = {}
        for s in specs:
            arr, shape = arrays[s["name"]], s.get("shape") or []
            b = shape[0] if shape and isinstance(shape[0], int) and shape[0] > 0 else 1
            part = arr[i * b:(i + 1) * b] if arr.ndim == len(shape) else arr[i]
            feeds[s["name"]] = np.ascontiguousarray(part.astype(s.get("dtype") or part.dtype))
        out.append(feeds)
    return out


def early_exit_text(name: str, ee: dict) -> str:
    """Two lines for the terminal: the mean over ``--inputs`` against the plain model, each exit, the worst case."""
    if "mean_ms" not in ee:
        return f"{name}: early exit, {ee['stages']} stages: {ee.get('note', '')}"
    exits = ", ".join(f"{'full' if e['exit'] == 'full' else 'exit ' + str(e['exit'])} {e['share']:.0%}"
                      + (f" at {e['mean_ms']:.3f} ms" if e["mean_ms"] is not None else "") for e in ee["exits"])
    vs = (f", x{ee['mean_vs_plain']:.2f} the plain model ({ee.get('plain_mean_ms') or ee['plain_ms_at_convert']:.3f}"
          f" ms)" if ee.get("mean_vs_plain") else "")
    return (f"{name}: early exit over {ee['samples']} samples of {ee['inputs']}: mean {ee['mean_ms']:.3f} ms{vs}; "
            f"worst case {ee['worst_case_ms']:.3f} ms\n  exits: {exits}")
