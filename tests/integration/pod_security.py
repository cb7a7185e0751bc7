"""The Pod Security Standards' `restricted` profile (with the `baseline` one it includes),
as its rules are written in the Kubernetes documentation, checked on a pod spec: what
the admission controller of a namespace labelled `pod-security.kubernetes.io/enforce:
restricted` would refuse."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

ALLOWED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
ALLOWED_SECCOMP = {"RuntimeDefault", "Localhost"}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {
    None,
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
}


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(kind, [])


def violations(spec: dict[str, Any]) -> list[str]:
    """Every rule of `restricted` the pod spec breaks, one line each ([] when none)."""
    found = []
    pod = spec.get("securityContext", {})
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            found.append(f"{host} is on")
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            found.append(f"volume {volume['name']}: {sorted(kinds - ALLOWED_VOLUMES)}")
    found += [
        f"sysctl {s['name']}" for s in pod.get("sysctls", []) if s["name"] not in SAFE_SYSCTLS
    ]
    if pod.get("runAsUser") == 0:
        found.append("the pod runs as user 0")
    if (pod.get("seLinuxOptions") or {}).get("type") not in SELINUX_TYPES:
        found.append("the pod's SELinux type")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in ALLOWED_SECCOMP:
        found.append(f"the pod's seccomp profile is {pod_seccomp}")
    for container in _containers(spec):
        name = container["name"]
        context = container.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: adds capabilities {capabilities['add']}")
        non_root = context.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"{name}: runAsNonRoot is not true")
        if context.get("runAsUser") == 0:
            found.append(f"{name}: runs as user 0")
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ALLOWED_SECCOMP:
            found.append(f"{name}: seccomp profile {seccomp}")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount {context['procMount']}")
        if (context.get("seLinuxOptions") or {}).get("type") not in SELINUX_TYPES:
            found.append(f"{name}: SELinux type")
        if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
            found.append(f"{name}: AppArmor unconfined")
        found += [f"{name}: hostPort" for p in container.get("ports", []) if p.get("hostPort")]
    return found
