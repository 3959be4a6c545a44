"""LiteRT's ``load.cc`` built against TensorFlow Lite's C++ API in the Debian sid root ``make tflite-sdk`` makes, and
run as a C++ consumer runs it: natively (chroot) and as an aarch64 build under qemu-user. For
``bench/consumer_parity.py --cc`` and ``tests/chain/test_load_cc.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

SDK = Path(os.environ.get("EDGEOPT_TFLITE_SDK", "/opt/edgeopt/tflite-sdk"))
ARCHES = {"x86_64": "g++", "aarch64 (qemu-user)": "aarch64-linux-gnu-g++"}


def available() -> str | None:
    """None when the SDK root can be used here, else why not."""
    if not (SDK / ".complete").is_file():
        return f"no TensorFlow Lite SDK root at {SDK} (make tflite-sdk)"
    if os.geteuid() != 0:
        return "building in the SDK root needs root (chroot)"
    return None if shutil.which("qemu-aarch64-static") else "no qemu-aarch64-static"


def tensorflow_lite_version() -> str:
    lib = sorted((SDK / "usr" / "lib" / "x86_64-linux-gnu").glob("libtensorflow-lite.so.*"))
    return lib[-1].name.removeprefix("libtensorflow-lite.so.") if lib else "?"


def build(artifact: Path, tag: str) -> tuple[Path, dict[str, list[str]]]:
    """``artifact`` copied into the SDK root and its load.cc built there for each architecture: (the folder inside
    the root, as seen from outside it; per architecture the command that runs the build, whose input files are
    paths under that folder, given from outside with :func:`inside`)."""
    inside_dir = Path("/tmp") / f"litert-cc-{os.getpid()}-{tag}"
    root_dir = SDK / inside_dir.relative_to("/")
    shutil.rmtree(root_dir, ignore_errors=True)
    shutil.copytree(artifact, root_dir / "art")
    commands = {}
    for arch, gxx in ARCHES.items():
        exe = inside_dir / f"load-{gxx}"
        subprocess.run(["chroot", str(SDK), gxx, "-std=c++17", "-O1", str(inside_dir / "art" / "load.cc"),
                        "-ltensorflow-lite", "-o", str(exe)], check=True, capture_output=True, timeout=600)
        commands[arch] = (["chroot", str(SDK), str(exe), str(inside_dir / "art")] if arch == "x86_64" else
                          ["qemu-aarch64-static", "-L", str(SDK), str(SDK / exe.relative_to("/")), str(root_dir / "art")])
    return root_dir, commands


def inside(path: Path, arch: str) -> str:
    """A file under the SDK root as the build of ``arch`` sees it (chroot: from the root; qemu-user: as is)."""
    return str(Path("/") / path.relative_to(SDK)) if arch == "x86_64" else str(path)


def cc_parity(artifact: Path, manifest: dict, feeds: list[dict], host: dict, samples: int = 16) -> dict:
    """Per architecture: the max |difference| of load.cc's outputs from the runner's (``host``: each output stacked
    over ``feeds``) on the first ``samples`` feeds."""
    from edgeopt.consumer.cc_io import parse_outputs

    root_dir, commands = build(artifact, "parity")
    out = {"tensorflow_lite": tensorflow_lite_version(), "samples": min(samples, len(feeds))}
    for arch, command in commands.items():
        worst = 0.0
        for i, feed in enumerate(feeds[:samples]):
            files = []
            for k, t in enumerate(manifest["inputs"]):
                np.asarray(feed[t["name"]], dtype=t["dtype"]).tofile(root_dir / f"in-{i}-{k}.bin")
                files.append(inside(root_dir / f"in-{i}-{k}.bin", arch))
            done = subprocess.run([*command, *files], capture_output=True, text=True, timeout=600)
            if done.returncode != 0:  # e.g. an op this TensorFlow Lite has no kernel for: said, not hidden
                worst = None
                out[arch] = {"failed": " ".join(done.stderr.strip().splitlines()[-2:])[:300]}
                break
            got = parse_outputs(done.stdout)
            for name, ref in host.items():
                worst = max(worst, float(np.max(np.abs(got[name] - np.asarray(ref[i], np.float64)))))
        if worst is not None:
            out[arch] = {"max_abs_diff": worst}
    shutil.rmtree(root_dir, ignore_errors=True)
    return out
