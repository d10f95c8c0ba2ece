"""Settings, declared once (proxy/config/groups.py) and read from a command-line flag, the environment variable
ALLOWLIST_PROXY_<NAME> or the config file, in that order, under the flat names operators know
(`--store-release-timeout-seconds`, `ALLOWLIST_PROXY_MAX_BODY_BYTES`, `db:`).

The code reads them by group (`settings.store.release_timeout_seconds`, `settings.http.max_body_bytes`). The
config file (`allowlist-proxy.yaml` in the working directory, or the `config` setting) takes the flat names as
keys, or a group as a mapping (`store: {batch_size: 200}`), plus `upstreams:` for several upstreams routed by
model.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from .groups import (
    GROUPS,
    HttpSettings,
    PolicySettings,
    StatsSettings,
    StoreSettings,
    TelemetrySettings,
    UpstreamSettings,
)

__all__ = ["DEFAULT_CONFIG_FILE", "ENV_PREFIX", "FLAT", "ConfigError", "Settings", "flat_settings"]

DEFAULT_CONFIG_FILE = "allowlist-proxy.yaml"
ENV_PREFIX = "ALLOWLIST_PROXY_"


class ConfigError(Exception):
    """A setting that cannot be used: `setting` names it, `message` says what is wrong and what to do."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.message = message


def flat_settings() -> Iterator[tuple[str, str, str, FieldInfo]]:
    """Every setting as (flat name, group, field name, field), in the groups' order."""
    for group, model in GROUPS.items():
        for name, info in model.model_fields.items():
            yield info.alias or name, group, name, info


# flat name -> (group, field name)
FLAT: dict[str, tuple[str, str]] = {flat: (group, name) for flat, group, name, _ in flat_settings()}


def _nested(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Flat names (and groups given whole, as mappings) as the groups' mappings; an unknown key is refused."""
    nested: dict[str, Any] = {}
    for key, value in data.items():
        if key == "config":
            nested["config"] = value
        elif key in GROUPS and isinstance(value, Mapping):
            model = GROUPS[key]
            for inner, item in value.items():
                field = inner if inner in model.model_fields else next(
                    (n for n, i in model.model_fields.items() if i.alias == inner), None)
                if field is None:
                    _unknown(f"{key}.{inner}", where, [*model.model_fields])
                nested.setdefault(key, {})[field] = item
        elif key in FLAT:
            group, field = FLAT[key]
            nested.setdefault(group, {})[field] = value
        else:
            _unknown(str(key), where, [*FLAT, *GROUPS])
    return nested


def _unknown(key: str, where: str, known: list[str]) -> None:
    close = difflib.get_close_matches(key.rpartition(".")[2], known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(key, f"unknown setting{where}; {hint}known: {', '.join(known)}")


class _InitSource(PydanticBaseSettingsSource):
    """Keyword arguments (the command line's flags, tests), by flat name or group."""

    def __init__(self, settings_cls: type[BaseSettings], given: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self.given = given

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads them all at once

    def __call__(self) -> dict[str, Any]:
        return _nested(self.given, "")


class _EnvSource(PydanticBaseSettingsSource):
    """ALLOWLIST_PROXY_<FLAT NAME>, any case; values are strings the groups' fields parse."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        environ = {k.upper(): v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)}
        found = {name: environ[ENV_PREFIX + name.upper()] for name in (*FLAT, "config")
                 if ENV_PREFIX + name.upper() in environ}
        return _nested(found, "")


class _ConfigFileSource(PydanticBaseSettingsSource):
    """The YAML config file, below flags and environment; unknown keys are refused with the file named."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self.path = path

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = yaml.safe_load(self.path.read_text()) or {}
        except OSError as exc:
            raise ConfigError("config", f"cannot read {self.path}: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError("config", _yaml_error(self.path, exc)) from exc
        if not isinstance(data, dict):
            raise ConfigError("config", f"{self.path} must be a mapping of setting names to values")
        nested = _nested({k: v for k, v in data.items() if k != "config"}, f" in {self.path}")
        return nested


def _yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    """One line: `file:line:column: what is wrong`, as editors and compilers write it."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    return f"{where}: not valid YAML: {problem}"


def config_file_path(init_kwargs: dict[str, Any]) -> Path | None:
    given = init_kwargs.get("config") or os.environ.get(ENV_PREFIX + "CONFIG")
    if given:
        path = Path(given)
        if not path.is_file():
            raise ConfigError("config", f"{path} does not exist: give the path of an allowlist-proxy.yaml")
        return path
    local = Path(DEFAULT_CONFIG_FILE)
    return local if local.is_file() else None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="forbid")

    config: Path | None = Field(
        None, description=f"YAML file with these settings as keys; default ./{DEFAULT_CONFIG_FILE} when present."
    )
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    stats: StatsSettings = Field(default_factory=StatsSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        given = dict(getattr(init_settings, "init_kwargs", {}))
        path = config_file_path(given)
        if path is not None:
            from proxy.policy.paths.protected import register_own_files  # the config is not the agent's to change

            register_own_files((str(path),))
        return _InitSource(settings_cls, given), _EnvSource(settings_cls), _ConfigFileSource(settings_cls, path)

    @classmethod
    def of(cls, **flat: Any) -> Settings:
        """Settings from flat names (`db=`, `store_batch_size=`), as the command line and tests give them."""
        return cls(**flat)

    def client_url(self) -> str:
        """Where clients reach the proxy: `proxy_url`, else the listen address (a wildcard one as loopback)."""
        http = self.http
        if http.proxy_url:
            return http.proxy_url.rstrip("/")
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(http.host, http.host)
        return f"http://{f'[{host}]' if ':' in host else host}:{http.port}"

    def flat(self, name: str) -> Any:
        """A setting's value by its flat name (`store_batch_size`): for messages and the start-up report."""
        group, field = FLAT[name]
        return getattr(getattr(self, group), field)
