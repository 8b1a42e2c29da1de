"""The deployment files agree with the agent: ports, probes, selectors and commands."""

from __future__ import annotations

import configparser
from pathlib import Path

import yaml
from agent_support import REPO

from monitor.serve.config import DEFAULT_PORT, load_agent_config

DEPLOY = REPO / "deploy"


def k8s_docs() -> dict[str, dict]:
    docs = {}
    for f in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            docs[doc["kind"]] = doc
    return docs


def test_kubernetes_daemonset_service_and_servicemonitor_fit_together(tmp_path: Path) -> None:
    docs = k8s_docs()
    assert {"DaemonSet", "Service", "ServiceMonitor", "ConfigMap"} <= docs.keys()
    ds, svc, sm = docs["DaemonSet"], docs["Service"], docs["ServiceMonitor"]
    pod = ds["spec"]["template"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": DEFAULT_PORT}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["spec"]["hostPID"] is True
    assert "nvidia.com/gpu" not in str(
        container.get("resources", {})
    )  # takes no GPU from workloads
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    # The ConfigMap's agent settings are valid agent settings.
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(docs["ConfigMap"]["data"]["agent.yaml"])
    assert load_agent_config(cfg, env={}).host_port == ("0.0.0.0", DEFAULT_PORT)


def test_compose_wires_agent_prometheus_and_grafana() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"vllm", "agent", "prometheus", "grafana", "dcgm-exporter"} <= services.keys()
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)  # nothing published beyond the box
    env = services["agent"]["environment"]
    assert env["HEADROOM_VLLM"].startswith("http://vllm:")
    prom_cfg = yaml.safe_load((REPO / "configs/prometheus/prometheus.yml").read_text())
    targets = {
        j["job_name"]: j["static_configs"][0]["targets"][0] for j in prom_cfg["scrape_configs"]
    }
    assert targets["headroom"] == f"agent:{DEFAULT_PORT}"
    assert targets["vllm"].split(":")[0] == "vllm"
    mounts = services["prometheus"]["volumes"]
    assert any(m.startswith("../configs/prometheus/rules:/etc/prometheus/rules") for m in mounts)
    assert prom_cfg["rule_files"] == ["/etc/prometheus/rules/*.yml"]


def test_dockerfile_and_systemd_unit_run_the_agent() -> None:
    docker = (DEPLOY / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["headroom", "agent"]' in docker
    assert f"EXPOSE {DEFAULT_PORT}" in docker and "/healthz" in docker
    assert "USER " in docker  # not root
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(DEPLOY / "systemd/headroom-agent.service")
    assert unit["Service"]["ExecStart"].split()[1:3] == ["agent", "--config"]
    assert unit["Service"]["KillSignal"] == "SIGTERM"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_example_config_is_valid() -> None:
    cfg = load_agent_config(DEPLOY / "agent.example.yaml", env={})
    assert cfg.host_port == ("127.0.0.1", DEFAULT_PORT)
    assert cfg.vllm == ("http://127.0.0.1:8000",)


def test_deploy_readme_documents_fleets() -> None:
    text = (DEPLOY / "README.md").read_text()
    for word in ("federate", "remote_write", "Thanos", "Mimir", "0.0.0.0:9402", "basic_auth_users"):
        assert word in text, word
