"""Every setting is documented in the README, with its real default, and the error shape is pinned."""

from __future__ import annotations

import re

from proxy.config import Settings, flat_settings
from proxy.errors import BadRequest, UpstreamTimeout
from tests.conftest import ROOT


def _readme_settings() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    return dict(re.findall(r"^\| `([a-z_]+)` \| ([^|]+?) \|", text, flags=re.M))


def test_every_setting_is_in_the_readme():
    documented = _readme_settings()
    assert {name for name, *_ in flat_settings()} | {"config"} == set(documented)


def test_readme_defaults_are_the_real_defaults():
    documented = _readme_settings()
    every = [(name, info) for name, _, _, info in flat_settings()] + [("config", Settings.model_fields["config"])]
    for name, info in every:
        default = info.get_default(call_default_factory=True)
        shown = documented[name].strip("`")
        if default is None:
            assert shown in ("unset", "policies/strict.yaml"), name
        elif isinstance(default, bool):
            assert shown == str(default).lower(), name
        elif isinstance(default, dict):
            assert shown == "{}", name
        elif isinstance(default, list) and not default:
            assert shown == "[]", name
        elif isinstance(default, list):  # written as the comma-separated form the setting reads
            assert shown == ",".join(default), name
        else:
            assert shown == str(default if not isinstance(default, float) or not default.is_integer()
                                else int(default)), name


def test_error_shape_is_pinned():
    assert BadRequest("bad", param="model").body() == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "model", "code": None}}
    assert UpstreamTimeout("slow").status_code == 504


def test_environment_variables_configure_settings(monkeypatch):
    monkeypatch.setenv("ALLOWLIST_PROXY_PORT", "9999")
    monkeypatch.setenv("ALLOWLIST_PROXY_MODEL_ALIASES", '{"a": "b"}')
    settings = Settings()
    assert settings.http.port == 9999 and settings.upstream.model_aliases == {"a": "b"}
    monkeypatch.setenv("ALLOWLIST_PROXY_SESSION_HEADER", "X-Run-Id, x-session-id")
    assert Settings().policy.session_header == ["x-run-id", "x-session-id"]
