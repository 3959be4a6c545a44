"""The manifest's ``consumer_check``: the artifact loaded through its runtime's plain API before publishing."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CarriedSetting(_Strict):
    """One ``runtime.settings`` entry: whether the plain API applies it from the model file alone, and how
    ``load.py``/``load.cc`` apply it."""

    name: str
    value: object = None
    plain_api_honours: bool
    how: str


class PlainLoad(_Strict):
    """One load of the artifact through its runtime's plain API in a subprocess (no edgeopt code), compared with
    edgeopt's runner on the check samples."""

    how: str  # e.g. "python load.py" or "python load.py --bare (the runtime's defaults)"
    applied: dict = {}  # what the runtime reported it applied (OpenVINO's INFERENCE_PRECISION_HINT, ORT's providers)
    max_abs_diff: float | None = None  # over every output element of every sample
    worst_output: str | None = None


class PlainDefaultJudged(_Strict):
    """The artifact judged again at the runtime's plain default where it differs from the judged setting (OpenVINO
    on a bf16 CPU): the metric there and whether the accuracy bound holds."""

    setting: str
    judged: str
    plain_default: str
    metric: str | None = None
    metric_value: float | None = None
    metric_drop: float | None = None
    bound: float | None = None
    holds_bound: bool | None = None
    samples: int = 0
    data_source: str = ""


class DeviceLoad(_Strict):
    """The artifact's ``load.py`` run on a device (``--verify-on``) with only the runtime and numpy there, its outputs
    compared with edgeopt's runner on this host within the device check's tolerance (``remote/verify.py``)."""

    where: str  # the device's inventory name
    how: str  # the command it ran there and what it could import
    emulated: bool = False
    device_arch: str | None = None
    runtime: str | None = None  # the runtime and its version on the device
    applied: dict = {}  # what the runtime on the device reported it applied
    samples: int = 0
    max_abs_diff: float | None = None  # the worst output's, over every element of every sample
    tolerance: float | None = None
    worst_output: str | None = None
    rule: str | None = None
    passed: bool | None = None  # None: not run there (skipped says why)
    skipped: str | None = None


class ConsumerCheck(_Strict):
    runtime: str  # the runtime and its version
    files: list[str] = []  # the loaders written beside the model (listed with their sha256 in ``files``)
    settings: list[CarriedSetting] = []
    samples: int = 0
    with_settings: PlainLoad | None = None  # load.py: the carried settings applied
    bare: PlainLoad | None = None  # the runtime's defaults: what a user who ignores load.py gets
    relative_tolerance: float | None = None  # x each output's largest absolute value (the rule)
    rule: str = ""
    passed: bool | None = None  # None: not run here (skipped says why)
    skipped: str | None = None
    plain_default: PlainDefaultJudged | None = None
    on_devices: list[DeviceLoad] = []  # load.py run on the --verify-on device
