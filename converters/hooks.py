"""What the rest of edgeopt asks of a backend besides converting: its loggers, its ``edgeopt doctor`` rows, its
entry in the ``host`` profile, how its model files count quantized units, its as-loaded graph and its placement
report, and the runtime's part of the ``load.py``/``load.cc`` written beside each artifact (its ``consumer.py``,
see :mod:`edgeopt.consumer`).

Each backend's folder holds a ``hooks.py`` whose ``HOOKS`` is a :class:`BackendHooks` (its class names it in
``Backend.hooks``); the core asks :func:`edgeopt.converters.registry.backend_hooks` for them, so no central module
keeps a table keyed by backend name. Importing a hooks module imports no heavy library: each hook imports what it
needs when it is called. The defaults here say "nothing to add".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, NamedTuple


class PlainDefault(NamedTuple):
    """Where a runtime's plain default differs from a setting an artifact was judged at: the line ``convert`` says
    about it; ``setting``, ``judged`` and ``ran`` (the default a bare load ran at here) when this machine ran that
    default (None: it could not, it is only said)."""

    line: str
    setting: str | None = None
    judged: str | None = None
    ran: str | None = None


class BackendHooks:
    # the Python loggers its libraries log under: kept at ERROR unless --verbose
    loggers: ClassVar[tuple[str, ...]] = ()
    # import names ``edgeopt doctor`` tries to import by default (each well under a second)
    fast_imports: ClassVar[frozenset[str]] = frozenset()
    # command-line tools it uses: name -> (apt package, what edgeopt uses it for, other places to look)
    tools: ClassVar[dict[str, tuple[str, str, tuple[str, ...]]]] = {}
    # suffixes of the model files whose compute units :meth:`units` counts (``edgeopt.quant_units``)
    unit_suffixes: ClassVar[tuple[str, ...]] = ()
    # suffix of the as-loaded graph written beside an artifact directory; None: no as-loaded view
    as_loaded_suffix: ClassVar[str | None] = None
    # suffixes of its own model files a user may hand over as they are (``edgeopt bench model.tflite``): wrapped
    # as an artifact by :mod:`edgeopt.wrapped_artifact` with :meth:`wrapped`
    model_file_suffixes: ClassVar[tuple[str, ...]] = ()
    # how a speed claim's FP32 reference runs in this backend (``edgeopt.speed_claim``); None: its INT8 verdict's
    # speed-up is not claimed
    fp32_reference: ClassVar[str | None] = None
    # whether its artifact's model file is what firmware embeds as a C array (``pipeline`` dist's ``c_array``)
    firmware_c_array: ClassVar[bool] = False
    # whether ``edgeopt tune`` tunes its kernels (a search whose database its next build reads), and the import names
    # the search needs (checked before the chain's stages run)
    tunes: ClassVar[bool] = False
    tune_requires: ClassVar[tuple[str, ...]] = ()
    # whether its device runtime (``Backend.device_runtime``) is installed in the emulated aarch64 board's site
    # (``remote/emulate``): an aarch64 wheel that runs under qemu-user
    emulated: ClassVar[bool] = False
    # its place in the ``host`` profile's backend list (lower first; the first is the profile's default backend)
    host_rank: ClassVar[int] = 100
    # whether :meth:`placement` reports where its ops run (asked of the runtime, or predicted)
    places: ClassVar[bool] = False
    # the most prefixes :meth:`prefix_timer` is asked to time in one run (each costs a conversion where it converts)
    prefix_timer_limit: ClassVar[int] = 12
    # its memory facts (``edgeopt.memory.facts``): the runtime's base cost measured once with its date and version,
    # the shares of the weights (and of the arena) it copies, and under ``micro`` TFLite Micro's; None: none measured
    memory: ClassVar[dict | None] = None
    # runner settings added while its artifact is timed interleaved with other runtimes' (a setting of that timing,
    # not of the artifact): ONNX Runtime's pool threads sleep after each call instead of spinning on the cores
    interleaved_settings: ClassVar[dict] = {}

    def check_source(self, model: Path, settings: dict, profile_name: str) -> None:
        """Refuse, before any work, a source model the profile's target for this backend can't take (an
        :class:`edgeopt.errors.EdgeoptError` naming what and the fix); nothing to refuse by default."""

    def prefix_timer(self, int8: bool, calib: Any, work: Path) -> tuple[Any, str] | None:
        """How an ONNX model (a prefix of the model, cut where an early exit may sit) is timed as this backend will
        run it, here, on one thread, at INT8 where ``int8`` (a backend that quantizes itself calibrates on
        ``calib``, a few samples of the model's inputs as an ``edgeopt.data.Dataset``): (ONNX path -> run function
        taking feeds, what runs it). ``work``:
        scratch space for what it converts. None: it can't be timed here (the early-exit cuts are then placed by
        the FLOP/byte cost model, labelled estimated)."""
        return None

    def device_requirements(self, dist: str) -> tuple[str, ...]:
        """The pip requirements that install this backend's device runtime (``dist``: its distribution) on a board
        (``--setup``) and in the emulated board's site; the site adds them to an existing site without
        dependencies, so list those too."""
        return (dist,)

    def prepare_emulated_site(self, site: Path) -> None:
        """Trim or adjust this backend's packages in the emulated board's site after they are installed."""

    def host_runtime(self, arch: str, cores: int) -> dict | None:
        """The ``host`` profile's backend entry (``name``, ``settings``) on this machine; None: not offered here."""
        return None

    def library_facts(self, module: str, imported: Any) -> dict:
        """What ``edgeopt doctor`` adds about one of its libraries once imported (providers, devices)."""
        return {}

    def doctor_warnings(self, runtimes: list[dict]) -> list[str]:
        """``edgeopt doctor``'s warnings about its installed libraries (``runtimes``: the doctor's rows)."""
        return []

    def wrapped(self, path: Path, threads: int | None) -> dict:
        """What an artifact wrapping the model file ``path`` says of it: ``inputs``/``outputs`` (manifest tensor
        entries), ``precision``, ``model_file`` (its name in the artifact), the runner's ``settings`` and the
        runtime's ``versions``."""
        raise NotImplementedError

    def tune(self, proto: Any, config: Any, tuning_db: str | Path | None, **how: Any) -> dict:
        """Tune the kernels of ``proto`` (the ONNX graph its stage gets) for its stage ``config``, into ``tuning_db``
        (None: its cache); ``how``: the search's budget and runner (``edgeopt.tune.tune``'s keywords). Returns
        ``edgeopt.tune.TuneResult``'s fields about the search: ``target``, ``key``, ``database``, ``runner``,
        ``tasks``, ``trials_measured``, ``trials_failed``, ``records``, ``stopped_by``, ``cost_model``, ``best_ms``."""
        raise NotImplementedError

    def units(self, model: Any) -> tuple[int, int] | None:
        """(quantized, total) compute units of a model file with one of ``unit_suffixes``, or of an in-memory model
        of its runtime; None: not one of its models."""
        return None

    def as_loaded(self, artifact_dir: Path, manifest: dict, out: Path) -> dict:
        """Write the artifact's graph as its runtime loads it to ``out``; its summary (``edgeopt inspect``)."""
        raise NotImplementedError

    def as_loaded_lines(self, facts: dict) -> list[str]:
        """The as-loaded summary's lines after its op types."""
        return []

    def runtime_settings(self, settings: dict) -> dict:
        """The runtime settings its artifact will have for a profile's ``settings`` (placement before converting)."""
        return dict(settings)

    def placement(self, model_path: Path, settings: dict, unit: str, bandwidth_gbps: float | None) -> dict | None:
        """The placement report of ``model_path`` under ``settings`` on a unit of kind ``unit``; None: not placed."""
        return None

    # the backend's consumer module ("<its package>.consumer": ``load_cc`` and ``PLAIN_API``, with its
    # ``load_template.py`` beside it); None: no load.py/load.cc are written for its artifacts
    consumer: ClassVar[str | None] = None

    def _consumer(self):
        import importlib

        return importlib.import_module(self.consumer) if self.consumer else None

    def load_py_template(self) -> Path | None:
        """The runtime's part of ``load.py``: a template file (``edgeopt.consumer.writer`` fills in its ``MODEL``,
        ``SETTINGS``, ``IO`` lines); None: no ``load.py``/``load.cc`` are written for its artifacts."""
        module = self._consumer()
        return Path(module.__file__).with_name("load_template.py") if module else None

    def load_cc(self, runtime: dict, manifest: dict) -> str:
        """``load.cc`` after its head line: the artifact's model loaded with ``runtime['settings']`` through the
        runtime's C++ API (``runtime``: the manifest's ``runtime`` entry; ``manifest``: manifest.json's content)."""
        module = self._consumer()
        if module is None:
            raise NotImplementedError
        return module.load_cc(runtime, manifest)

    def plain_api_settings(self) -> dict[str, tuple[bool, str]]:
        """Setting name -> (whether the runtime's plain API applies it from the model file alone, how ``load.py``
        and ``load.cc`` apply it or why the file carries it); a setting not listed: not honoured."""
        module = self._consumer()
        return module.PLAIN_API if module else {}

    def not_loadable_here(self, manifest: dict) -> str | None:
        """Why the artifact's model file can't be loaded on this machine (a library built for a board); None: it
        can."""
        return None

    def plain_default(self, manifest: dict, bare: dict, profile: Any) -> PlainDefault | None:
        """Where the runtime's plain default differs from a setting the artifact was judged at, for the profile
        ``profile`` (``bare``: what ``load.py --bare`` reported it applied here); None: nothing to say."""
        return None
