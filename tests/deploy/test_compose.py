"""deploy/docker-compose.yml without a Docker engine: the services and images, Triton in
explicit model-control mode with a models volume and a GPU, the simulator profile in its
place, and every host and port agreeing with the configs the services mount."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
import yaml

from support import REPO
from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.config import load_config

pytestmark = pytest.mark.real

DEPLOY = REPO / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
EXPORTER_PORT = 9849
_DEFAULTED = re.compile(r"\$\{(\w+):-([^}]*)\}")


def resolve(text: str) -> str:
    """Compose's ``${VAR:-default}`` with nothing set in the environment."""
    assert "$" not in _DEFAULTED.sub("", text), f"a variable without a default: {text}"
    return _DEFAULTED.sub(lambda m: m.group(2), text)


def mounts(service: str) -> dict[str, Path | str]:
    """Container path → host path (relative to deploy/) or volume name, read-only or not."""
    out: dict[str, Path | str] = {}
    for volume in SERVICES[service].get("volumes", []):
        source, target = resolve(volume).split(":")[:2]
        out[target] = (DEPLOY / source).resolve() if source.startswith(".") else source
    return out


def host_file(service: str, container_path: str) -> Path:
    """The host file behind ``container_path``, through a file or a folder mount."""
    for target, source in sorted(mounts(service).items(), key=lambda m: -len(m[0])):
        if isinstance(source, Path) and (
            container_path == target or container_path.startswith(target + "/")
        ):
            return source / container_path.removeprefix(target).lstrip("/")
    raise AssertionError(f"{service}: nothing mounted at {container_path}")


def flag(service: str, name: str) -> str:
    """The value of ``--name=value`` in the service's command."""
    for argument in SERVICES[service]["command"]:
        if argument.startswith(f"--{name}="):
            return str(argument.split("=", 1)[1])
    raise AssertionError(f"{service}: no --{name}")


def published(service: str) -> dict[int, tuple[str, int]]:
    """Container port → (host address, host port)."""
    out = {}
    for port in SERVICES[service].get("ports", []):
        address, host, container = port.split(":")
        out[int(container)] = (address, int(host))
    return out


def test_services_images_and_profiles() -> None:
    """Breaks if a service is missing or extra, an image is unpinned, or triton and sim both run."""
    assert set(SERVICES) == {
        "triton",
        "sim",
        "tritonwatch",
        "prometheus",
        "alertmanager",
        "grafana",
    }
    image = resolve(SERVICES["triton"]["image"])
    assert re.fullmatch(r"nvcr\.io/nvidia/tritonserver:\d{2}\.\d{2}-py3", image), image
    for name in ("prometheus", "alertmanager", "grafana"):
        repository, _, tag = SERVICES[name]["image"].rpartition(":")
        assert repository and tag and tag != "latest", f"{name} image is pinned"
    for name in ("sim", "tritonwatch"):
        build = SERVICES[name]["build"]
        assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == REPO / "Dockerfile"
    # Exactly one of Triton and the simulator runs, each in its own profile.
    assert SERVICES["triton"]["profiles"] == ["triton"]
    assert SERVICES["sim"]["profiles"] == ["sim"]
    for always in ("tritonwatch", "prometheus", "alertmanager", "grafana"):
        assert "profiles" not in SERVICES[always]


def test_triton_explicit_model_control_models_volume_and_gpu() -> None:
    """Breaks if Triton loses explicit model control, its models volume, the GPU or a port."""
    triton = SERVICES["triton"]
    assert triton["command"][0] == "tritonserver"
    assert flag("triton", "model-control-mode") == "explicit"
    assert flag("triton", "load-model") == "*"
    repository = host_file("triton", flag("triton", "model-repository"))
    configs = sorted(repository.glob("*/config.pbtxt"))
    assert configs, f"no model in {repository}"
    assert "simple" in {c.parent.name for c in configs}
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert set(published("triton")) == {8000, 8001, 8002}


def test_sim_profile_stands_in_for_triton() -> None:
    """Same ports and the network name "triton": tritonwatch's config works with either."""
    sim = SERVICES["sim"]
    assert sim["command"] == ["simulate", "--host", "0.0.0.0"]
    assert "triton" in sim["networks"]["default"]["aliases"]
    assert published("sim") == published("triton")
    assert "deploy" not in sim, "the simulator needs no GPU"


def test_tritonwatch_config_points_at_triton_and_listens_where_prometheus_scrapes() -> None:
    """Breaks if the daemon's config leaves Triton or Alertmanager, or listens elsewhere."""
    service = SERVICES["tritonwatch"]
    assert service["command"][:2] == ["run", "--config"]
    config = load_config(host_file("tritonwatch", service["command"][2]))
    (target,) = config.targets
    for url, port in (
        (target.effective_http_url, 8000),
        (target.effective_grpc_url, 8001),
        (target.effective_metrics_url, 8002),
    ):
        parts = urlsplit(url)
        assert (parts.hostname, parts.port) == ("triton", port), url
    listen = service["environment"]["TRITONWATCH_LISTEN"]
    assert listen == config.exporter.listen == f"0.0.0.0:{EXPORTER_PORT}"
    assert published("tritonwatch") == {EXPORTER_PORT: ("127.0.0.1", EXPORTER_PORT)}
    alertmanager = urlsplit(config.alerting.alertmanager_url or "")
    port = int(flag("alertmanager", "web.listen-address").rsplit(":", 1)[1])
    assert (alertmanager.hostname, alertmanager.port) == ("alertmanager", port)


def test_prometheus_scrapes_tritonwatch_and_alerts_alertmanager() -> None:
    """Breaks if Prometheus scrapes another address than the daemon's or alerts elsewhere."""
    path = host_file("prometheus", flag("prometheus", "config.file"))
    assert path == DEPLOY / "prometheus" / "prometheus.yml"
    config = yaml.safe_load(path.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "tritonwatch"]
    assert job["static_configs"][0]["targets"] == [f"tritonwatch:{EXPORTER_PORT}"]
    manager = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"][0]
    port = flag("alertmanager", "web.listen-address").rsplit(":", 1)[1]
    assert manager == f"alertmanager:{port}"
    assert flag("prometheus", "web.listen-address").endswith(":9090")


def test_prometheus_rules_are_those_of_the_daemons_config() -> None:
    """Breaks if the rule files Prometheus loads are missing or differ from what
    `tritonwatch rules` makes of the compose daemon's config (other SLOs than measured)."""
    files = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
    assert [f.name for f in files] == ["tritonwatch-slo.rules.yml"]
    loaded = [g for f in files for g in yaml.safe_load(f.read_text())["groups"]]
    config = load_config(DEPLOY / "compose" / "tritonwatch.yaml")
    assert loaded == yaml.safe_load(render_config_rules(config))["groups"]


def test_grafana_provisioning_matches_the_mounts_and_prometheus() -> None:
    """Breaks if Grafana's provisioning misses its mounts, Prometheus, or the home dashboard."""
    grafana = mounts("grafana")
    provisioning = grafana["/etc/grafana/provisioning"]
    assert provisioning == REPO / "grafana" / "provisioning"
    (source,) = yaml.safe_load(
        (REPO / "grafana/provisioning/datasources/prometheus.yaml").read_text()
    )["datasources"]
    url = urlsplit(source["url"])
    assert (url.hostname, url.port) == ("prometheus", 9090)
    assert source["type"] == "prometheus"
    assert source["isDefault"] is True
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["global"]
    assert source["jsonData"]["timeInterval"] == scrape["scrape_interval"]
    (provider,) = yaml.safe_load(
        (REPO / "grafana/provisioning/dashboards/tritonwatch.yaml").read_text()
    )["providers"]
    assert provider["type"] == "file"
    assert grafana[provider["options"]["path"]] == REPO / "grafana" / "dashboards"
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert host_file("grafana", home).is_file()


def test_ports_are_published_on_loopback_only() -> None:
    """Breaks if any service publishes a port beyond the host's loopback address."""
    for name in SERVICES:
        for address, _ in published(name).values():
            assert address == "127.0.0.1", name


def test_every_mounted_host_file_exists() -> None:
    """Breaks if a file or folder a compose service mounts from the repository is gone."""
    sources = [
        source for name in SERVICES for source in mounts(name).values() if isinstance(source, Path)
    ]
    assert DEPLOY / "alertmanager" / "alertmanager.yml" in sources  # the mounts were read
    assert [str(s.relative_to(REPO)) for s in sources if not s.exists()] == []


def test_alertmanager_config_passes_amtool() -> None:
    """Breaks if deploy/alertmanager/alertmanager.yml is gone or Alertmanager would refuse
    it (amtool comes with prometheus-alertmanager, which make test installs)."""
    path = host_file("alertmanager", flag("alertmanager", "config.file"))
    assert path == DEPLOY / "alertmanager" / "alertmanager.yml"
    assert path.is_file(), f"{path.relative_to(REPO)} is missing"
    checked = subprocess.run(["amtool", "check-config", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def triton_python_backend() -> Iterator[types.ModuleType]:
    """A stand-in for the module the Python backend gives its models."""

    class Tensor:
        def __init__(self, name: str, array: np.ndarray) -> None:
            self.name, self.array = name, array

        def as_numpy(self) -> np.ndarray:
            return self.array

    class InferenceResponse:
        def __init__(self, output_tensors: list[Tensor]) -> None:
            self.outputs = {t.name: t.array for t in output_tensors}

    module = types.ModuleType("triton_python_backend_utils")
    module.Tensor = Tensor  # type: ignore[attr-defined]
    module.InferenceResponse = InferenceResponse  # type: ignore[attr-defined]
    module.get_input_tensor_by_name = lambda request, name: request[name]  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_the_example_model_adds_and_subtracts(triton_python_backend: types.ModuleType) -> None:
    """The compose stack's Triton model computes what the simulator's "simple" does."""
    path = DEPLOY / "compose" / "models" / "simple" / "1" / "model.py"
    spec = importlib.util.spec_from_file_location("simple_model", path)
    assert spec is not None and spec.loader is not None
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    request = {"INPUT0": triton_python_backend.Tensor("INPUT0", a),
               "INPUT1": triton_python_backend.Tensor("INPUT1", b)}  # fmt: skip
    (response,) = model.TritonPythonModel().execute([request])
    assert (response.outputs["OUTPUT0"] == a + b).all()
    assert (response.outputs["OUTPUT1"] == a - b).all()
    assert response.outputs["OUTPUT0"].dtype == np.int32
