"""Backend ``tvm``: the chain's ONNX (FP32, or QDQ INT8) compiled by Apache TVM 0.27 (Relax) into ``model.so``.

ONNX → Relax (``tvm.relax.frontend.onnx.from_onnx``, static shapes, the importer's convert map
checked first) → ``tvm.compile`` for the profile's target dict → ``model.so`` with the weights
bundled (``main`` takes the inputs in ONNX order). A foreign target (aarch64 for a Pi 5 or an Orin)
is cross-compiled with ``<triple>-g++``.

A MetaSchedule database made by ``edgeopt tune`` for the same backend-input graph and target
(``$EDGEOPT_CACHE_DIR/tvm-tuning/<key>``), or named by ``tuning_db`` (recipe ``stages: {tvm: {tuning_db: DIR}}``),
is applied automatically; the manifest says whether the library is tuned and with which database. The plan
carries the database's content hash (``tuning_db_sha256``: of ``tuning_db``, or of every database in the tuning
cache), so a cached build made before ``edgeopt tune`` is not served after it.

INT8: TVM's importer maps QuantizeLinear/DequantizeLinear to quantize/dequantize ops, which
``tvm.compile`` lowers to float arithmetic around each (de)quantization; there is no integer
conv kernel. The library computes INT8-rounded values (the numbers match the QDQ model) but is not
faster than FP32 — the manifest's notes say so.
"""

from __future__ import annotations

import time
from pathlib import Path

from edgeopt.converters.backends.tvm import build as tb
from edgeopt.converters.base import (
    Backend,
    ChainContext,
    ChainOptions,
    Format,
    Intermediate,
    StageConfig,
    from_option,
)
from edgeopt.converters.registry import register_stage
from edgeopt.enums import BackendName, Precision

LIBRARY = "model.so"
INT8_NOTE = ("TVM lowers the QDQ graph's quantize/dequantize to float arithmetic (no integer kernels): "
             "INT8-rounded numbers, no INT8 speed-up")


class TVMConfig(StageConfig):
    target: dict | None = None  # the profile's target dict; None = this machine
    tuning_db: str | None = None  # a MetaSchedule JSON database dir to apply (else the tuning cache)
    use_tuning_cache: bool = True  # look for $EDGEOPT_CACHE_DIR/tvm-tuning/<key>
    threads: int | None = from_option("threads")  # runtime threads (the runner's thread pool)
    profile_name: str | None = None  # the planner's: named in the hint to tune an untuned library
    # content hash of the database(s) the build may apply (tuning_db's, or the whole tuning cache's), "none":
    # settled by the planner (settle_config), so a new 'edgeopt tune' changes the plan hash and the cache keys
    tuning_db_sha256: str = tb.NO_DATABASE


@register_stage
class TVMBackend(Backend):
    name = "tvm"
    backend = BackendName.TVM
    Config = TVMConfig
    accepts = (Format.ONNX,)
    produces = Format.TVM_LIB
    extra = "tvm"
    requires = ("tvm", "tvm_ffi")
    libraries = (("tvm", "apache-tvm"), ("tvm_ffi", "apache-tvm-ffi"))
    device_runtime = ("tvm", "apache-tvm")
    deterministic = (True, "model.so byte-identical across two clean builds on one machine (checked by hand on the "
                     "digits CNN); it is compiled and linked by the system compiler, so another compiler or machine "
                     "may give other bytes; a tuned build's manifest names its tuning database's path "
                     "(runtime.settings.tuning.database), which moves with the cache directory")
    preflight_check = "edgeopt.converters.backends.tvm.preflight:check_tvm"
    per_layer_profiler = "edgeopt.converters.backends.tvm.per_layer:profile_tvm"
    per_layer_matcher = "edgeopt.converters.backends.tvm.per_layer:match_kernels"
    quantizes_itself = False
    pays_only_tuned = True  # untuned, slower than the others: built only when named (edgeopt tune first)
    quantizer = "edgeopt.converters.quantize.qdq_quantizer:QdqQuantizer"  # the qdq stage's Q/DQ
    hooks = "edgeopt.converters.backends.tvm.hooks:HOOKS"
    precisions = (Precision.FP32, Precision.INT8)

    @classmethod
    def configure(cls, options: ChainOptions) -> TVMConfig:
        s = options.backend_settings
        return TVMConfig(target=s.get("target"), tuning_db=s.get("tuning_db"),
                         threads=options.threads or s.get("threads"), profile_name=options.profile_name)

    @classmethod
    def settle_config(cls, config: TVMConfig) -> TVMConfig:
        """The planner's last word, after the recipe's overrides: the identity of the tuning database(s)."""
        if config.tuning_db:
            sha = tb.database_sha256(Path(config.tuning_db).expanduser())
        else:
            sha = tb.tuning_cache_sha256() if config.use_tuning_cache else tb.NO_DATABASE
        return config.model_copy(update={"tuning_db_sha256": sha})

    def run(self, model: Intermediate, config: TVMConfig, ctx: ChainContext) -> Intermediate:
        from edgeopt.model import graph_inputs, graph_outputs, load_onnx

        proto = load_onnx(model.path, check=False)
        target_dict = tb.resolve_target(config.target)
        tb.cross_compiler_for(target_dict)  # exit 4 before any work when the cross compiler is missing
        target = tb.make_target(target_dict)
        report = ctx.stage_report()

        t0 = time.perf_counter()
        mod = tb.import_onnx(proto)
        t_import = time.perf_counter() - t0
        db_dir, how = self._database(proto, target_dict, config)
        t0 = time.perf_counter()
        executable = tb.build(mod, target, db_dir)
        t_build = time.perf_counter() - t0
        lib = ctx.artifact_dir / LIBRARY
        tb.export(executable, lib, target_dict)
        twin = self._host_twin(mod, target_dict, ctx) if tb.is_cross(target_dict) or \
            tb.device_kind(target_dict) != "cpu" else None

        tuning = {"tuned": db_dir is not None, "database": str(db_dir) if db_dir else None, "found_by": how,
                  "records": tb.database_records(db_dir) if db_dir else 0,
                  "sha256": tb.database_sha256(db_dir) if db_dir else None,
                  "key": tb.tuning_key(proto, target_dict)}
        settings = {"target": target_dict, "device": tb.device_kind(target_dict), "threads": config.threads,
                    "arch": tb.target_arch(target_dict), "tuning": tuning,
                    "versions": tb.versions()}
        notes_text = []
        if model.precision == Precision.INT8:
            notes_text.append(INT8_NOTE)
        if db_dir is None:
            notes_text.append("untuned: TVM's default schedules (50-100x slower than ONNX Runtime on x86); "
                              "run 'edgeopt tune' first")
            ctx.warn("tvm: library is UNTUNED (no MetaSchedule database for this model and target); "
                     f"run 'edgeopt tune MODEL --profile {config.profile_name or 'PROFILE'}' to tune it")
        if twin:
            notes_text.append(f"validated here with {twin['model']}, the same Relax module built for this machine "
                              f"({twin['arch']}); {LIBRARY} itself ({tb.target_arch(target_dict)}, "
                              f"{tb.device_kind(target_dict)}) runs only on the device or under emulation")
        runtime = {
            "backend": self.backend.value,
            "model": LIBRARY,
            "host_twin": twin,
            "settings": settings,
            "notes": notes_text,
            "io": {kind: [{"name": t.name, "runtime_name": t.name, "transpose": None} for t in specs]
                   for kind, specs in (("inputs", graph_inputs(proto)), ("outputs", graph_outputs(proto)))},
        }
        report.update(target=target_dict, tuned=tuning["tuned"], tuning_database=tuning["database"],
                      tuning_records=tuning["records"], import_seconds=round(t_import, 3),
                      build_seconds=round(t_build, 3), library_arch=tb.elf_machine(lib),
                      library_bytes=lib.stat().st_size, cross_compiled=tb.is_cross(target_dict), notes=notes_text)
        return Intermediate(lib, Format.TVM_LIB, model.precision, {**model.notes, "runtime": runtime})

    @staticmethod
    def _host_twin(mod, target_dict: dict, ctx: ChainContext) -> dict:
        """Build the same module for this machine (CPU), so the chain can validate a foreign library's graph."""
        host = tb.resolve_target({"kind": "llvm"})
        name = f"model.{tb.host_arch()}.so"
        tb.export(tb.build(mod, tb.make_target(host)), ctx.artifact_dir / name, host)
        ctx.warn(f"tvm: {LIBRARY} is for {tb.target_arch(target_dict)}/{tb.device_kind(target_dict)}: validation here runs "
                 f"{name} (the same graph built for {tb.host_arch()}), not the device library; use emulate/remote-bench")
        return {"model": name, "arch": tb.host_arch(), "target": host}

    @staticmethod
    def _database(proto, target_dict: dict, config: TVMConfig) -> tuple[Path | None, str | None]:
        """The MetaSchedule database to apply, and how it was found (``tuning_db`` or ``cache``)."""
        from edgeopt.errors import BadInputError

        if config.tuning_db:
            d = Path(config.tuning_db).expanduser()
            if tb.database_records(d) == 0:
                raise BadInputError(f"tvm: tuning database '{d}' has no tuning records",
                                    f"run 'edgeopt tune ... --tuning-db {d}' first, or drop tuning_db")
            return d, "tuning_db"
        if config.use_tuning_cache:
            d = tb.tuning_dir(tb.tuning_key(proto, target_dict))
            if tb.database_records(d) > 0:
                return d, "cache"
        return None, None


BACKEND = TVMBackend
