"""A microcontroller target as a profile's TFLite backend states it (``settings: {micro: {cpu: cortex-m7, ...}}``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MicroTarget(BaseModel):
    """The core the firmware is compiled for and the memory it has (``flash_bytes``/``ram_bytes`` from the
    profile, set by the plan)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: str = Field(pattern=r"^cortex-m[0-9a-z.+]+$")  # arm-none-eabi-gcc -mcpu
    fpu: str = "auto"  # -mfpu (auto: the core's default)
    float_abi: str = "hard"  # -mfloat-abi: hard | softfp | soft
    flash_bytes: int | None = None
    ram_bytes: int | None = None

    def gcc_flags(self) -> list[str]:
        flags = [f"-mcpu={self.cpu}", "-mthumb", f"-mfloat-abi={self.float_abi}"]
        if self.float_abi != "soft":
            flags.append(f"-mfpu={self.fpu}")
        return flags
