"""Settings: six groups (`upstream`, `store`, `http`, `policy`, `stats`, `telemetry`, proxy/config/groups.py),
each setting declared once, read by its flat name from flags, the environment and the config file
(proxy/config/settings.py)."""

from __future__ import annotations

# The URL rules belong to the store's dialect seam; re-exported here for the settings' readers.
from proxy.store.dialect import normalize_db_url

from .groups import GROUPS, LOG_FORMATS, LOG_LEVELS, UpstreamConfig
from .settings import DEFAULT_CONFIG_FILE, ENV_PREFIX, FLAT, ConfigError, Settings, flat_settings

__all__ = ["DEFAULT_CONFIG_FILE", "ENV_PREFIX", "FLAT", "GROUPS", "LOG_FORMATS", "LOG_LEVELS", "ConfigError",
           "Settings", "UpstreamConfig", "flat_settings", "normalize_db_url"]
