#!/usr/bin/env python3
"""Checks the deployment files as far as a machine without Docker or Kubernetes allows.

- compose.yaml, the Kubernetes manifests and the collector config parse as YAML;
- every file, build context and Dockerfile they reference exists;
- what the manifests reference by name (ConfigMap, Secret, labels, probe paths, the
  migrate flag) exists in the manifests or in the server's code;
- the systemd unit passes `systemd-analyze verify` (with ExecStart pointed at the built
  agent binary, since %h/.cargo/bin is not installed here).

Exits non-zero with every problem listed. Usage: deploy/check.py [AGENT_BINARY]
"""
import os, shutil, subprocess, sys, tempfile

import yaml

DEPLOY = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DEPLOY)
problems = []


def load_all(path):
    with open(path) as file:
        return [doc for doc in yaml.safe_load_all(file) if doc]


def server_source():
    text = []
    for folder, _, files in os.walk(os.path.join(ROOT, "server", "src")):
        for name in files:
            if name.endswith(".rs"):
                with open(os.path.join(folder, name)) as file:
                    text.append(file.read())
    return "\n".join(text)


def check_compose():
    (compose,) = load_all(os.path.join(DEPLOY, "compose.yaml"))
    for name, service in compose["services"].items():
        build = service.get("build")
        if build:
            context = os.path.normpath(os.path.join(DEPLOY, build["context"]))
            if not os.path.isfile(os.path.join(context, build["dockerfile"])):
                problems.append(f"compose: {name} builds from a missing {build['dockerfile']}")
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                if not os.path.exists(os.path.join(DEPLOY, source)):
                    problems.append(f"compose: {name} mounts missing {source}")
        for dependency in service.get("depends_on", {}):
            if dependency not in compose["services"]:
                problems.append(f"compose: {name} depends on unknown service {dependency}")
    if sum(1 for s in compose["services"].values() if s.get("environment", {}).get("TETHER_REDIS_URL")) < 2:
        problems.append("compose: expected two replicas sharing Redis")
    return compose


def check_dockerfile():
    with open(os.path.join(DEPLOY, "Dockerfile")) as file:
        for line in file:
            words = line.split()
            if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
                for source in words[1:-1]:
                    if source != "." and not os.path.exists(os.path.join(ROOT, source)):
                        problems.append(f"Dockerfile copies missing {source}")


def check_kubernetes(source):
    docs = {}
    for name in sorted(os.listdir(os.path.join(DEPLOY, "k8s"))):
        for doc in load_all(os.path.join(DEPLOY, "k8s", name)):
            docs[(doc["kind"], doc["metadata"]["name"])] = doc
    deployment = docs[("Deployment", "tether-server")]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    if deployment["spec"]["selector"]["matchLabels"] != labels:
        problems.append("k8s: the Deployment's selector does not match its pods")
    for kind in ("Service", "PodDisruptionBudget"):
        selector = docs[(kind, "tether-server")]["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        if any(labels.get(key) != value for key, value in selector.items()):
            problems.append(f"k8s: the {kind} selects no server pod")
    for workload in (deployment, docs[("Job", "tether-migrate")]):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for ref in container.get("envFrom", []):
                kind, name = ("ConfigMap", ref["configMapRef"]["name"]) if "configMapRef" in ref \
                    else ("Secret", ref["secretRef"]["name"])
                if (kind, name) not in docs:
                    problems.append(f"k8s: {container['name']} reads missing {kind} {name}")
            for arg in container.get("args", []):
                if arg.startswith("--") and f'"{arg[2:]}"' not in source and f"{arg[2:].replace('-', '_')}" not in source:
                    problems.append(f"k8s: the server has no flag {arg}")
            for probe in ("readinessProbe", "livenessProbe"):
                path = container.get(probe, {}).get("httpGet", {}).get("path")
                if path and f'"{path}"' not in source:
                    problems.append(f"k8s: the server serves no {path} for the {probe}")


def check_systemd(agent):
    if not shutil.which("systemd-analyze"):
        problems.append("systemd-analyze is missing; cannot verify the unit")
        return
    with open(os.path.join(DEPLOY, "systemd", "tether-agent.service")) as file:
        unit = file.read().replace("%h/.cargo/bin/tether-agent", agent)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "tether-agent.service")
        with open(path, "w") as file:
            file.write(unit)
        result = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True)
        # Outside a booted systemd, verify also complains about the host's own units; only
        # lines about ours count.
        ours = [line for line in (result.stdout + result.stderr).splitlines() if "tether-agent" in line]
        if ours:
            problems.append("systemd-analyze verify: " + " | ".join(ours))


def main():
    agent = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "debug", "tether-agent")
    check_compose()
    check_dockerfile()
    check_kubernetes(server_source())
    load_all(os.path.join(DEPLOY, "otel-collector.yaml"))
    check_systemd(os.path.abspath(agent))
    for problem in problems:
        print(problem, file=sys.stderr)
    print("deploy files: ok" if not problems else f"deploy files: {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
