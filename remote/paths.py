"""Where the remote side keeps the device inventory, emulator state and caches: the roots are
``edgeopt.paths`` (one place for every directory edgeopt uses)."""

from __future__ import annotations

from edgeopt.paths import cache_dir, config_dir, data_dir, default_devices_file

__all__ = ["cache_dir", "config_dir", "data_dir", "default_devices_file"]
