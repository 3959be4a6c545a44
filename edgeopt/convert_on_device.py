"""``convert`` with ``verify_on``: the artifact also runs on a device before it is published.

The public ``edgeopt.convert`` (the API and the CLI) is this function. It makes the device verifier
(``edgeopt.remote.verify``) and hands it to :func:`edgeopt.convert.convert`, which never imports ``remote``
itself: remote-bench converts models through ``edgeopt.convert``, so the import would close a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.convert import ConvertResult
from edgeopt.convert import convert as convert_here
from edgeopt.options import ConvertOptions


@dataclass(frozen=True)
class DeviceVerifier:
    """``--verify-on DEVICE``: the device is checked before any work, the artifact run there before publish."""

    device: str

    def check(self) -> None:
        from edgeopt.remote.verify import check_verify_device

        check_verify_device(self.device)

    def verify(self, artifact_dir, samples, precision: str, *, threads=None) -> dict:
        from edgeopt.remote.verify import verify_on

        return verify_on(artifact_dir, self.device, samples, precision, threads=threads)


def convert(model, profile, output, options: ConvertOptions | None = None, **keywords) -> ConvertResult:
    """:func:`edgeopt.convert.convert` (same arguments), verified on ``verify_on``'s device when it is given."""
    from edgeopt.options import from_keywords

    passthrough = {k: keywords.pop(k) for k in ("progress", "on_warning", "plan") if k in keywords}
    if options is None:
        options, keywords = from_keywords(ConvertOptions, keywords, where="convert"), {}
    verifier = DeviceVerifier(options.verify_on) if options.verify_on else None
    # keywords left beside options: convert_here refuses them ("not both")
    return convert_here(model, profile, output, options, verifier=verifier, **passthrough, **keywords)
