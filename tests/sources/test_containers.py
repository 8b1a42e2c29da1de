"""Container and pod from /proc/PID/cgroup, on the paths each runtime really writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from monitor.sources.containers import ContainerRef, PodDirectory, parse_cgroup, read_cgroup
from monitor.sources.gpu_processes import ProcessIdentities

CGROUPS = Path(__file__).resolve().parent.parent / "fixtures" / "cgroup"
SHORT = "8f2d6c1b9a7e"
UID = "8c5b1a9e-3f1d-4c2a-9b7e-0d6f2a1b3c4d"


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("docker-v1.txt", ContainerRef(SHORT, "docker", None)),
        ("docker-v2-systemd.txt", ContainerRef(SHORT, "docker", None)),
        ("k8s-containerd-v2-systemd.txt", ContainerRef(SHORT, "containerd", UID)),
        # cgroupfs driver: the runtime is not in the path, the pod's UID keeps its dashes.
        ("k8s-containerd-v1-cgroupfs.txt", ContainerRef(SHORT, None, UID)),
        ("k8s-crio-v2-guaranteed.txt", ContainerRef(SHORT, "cri-o", UID)),
        # conmon watches the container from beside it: in the pod, not the container.
        ("k8s-crio-conmon.txt", ContainerRef(None, None, UID)),
        ("podman-rootless-v2.txt", ContainerRef(SHORT, "podman", None)),
        ("host-v2.txt", None),
        ("own-cgroupns.txt", None),
    ],
)
def test_each_runtime_s_path(fixture: str, expected: ContainerRef | None) -> None:
    assert parse_cgroup((CGROUPS / fixture).read_text()) == expected


def test_garbage_is_no_container() -> None:
    assert parse_cgroup("") is None
    assert parse_cgroup("not a cgroup file\n::\n") is None
    assert parse_cgroup("0::/docker/abc\n") is None  # not a container id


def test_read_cgroup_of_a_fake_proc_and_of_this_process(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").write_text((CGROUPS / "docker-v2-systemd.txt").read_text())
    assert read_cgroup(77, str(tmp_path)) == ContainerRef(SHORT, "docker", None)
    assert read_cgroup(78, str(tmp_path)) is None
    read_cgroup(os.getpid())  # the real file parses, whatever this machine runs in


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def test_pod_names_from_the_kubelet_log_directories(tmp_path: Path) -> None:
    (tmp_path / f"inference_vllm-llama-7c9f_{UID}").mkdir()
    (tmp_path / "kube-system_coredns-5d78_0a1b2c3d-0000-4000-8000-000000000001").mkdir()
    (tmp_path / "stray-file").write_text("")
    clock = Clock()
    pods = PodDirectory(str(tmp_path), every_s=30.0, clock=clock)
    assert pods.lookup(UID) == ("inference", "vllm-llama-7c9f")
    # A pod started since: looked for again at once, not after 30 s.
    new = "11111111-2222-4333-8444-555555555555"
    (tmp_path / f"batch_trainer-0_{new}").mkdir()
    clock.t += 2.0
    assert pods.lookup(new) == ("batch", "trainer-0")
    assert PodDirectory(str(tmp_path / "absent")).lookup(UID) is None


def test_identities_put_cgroup_and_pod_together(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / str(os.getpid())).mkdir(parents=True)
    (proc / str(os.getpid()) / "cgroup").write_text(
        (CGROUPS / "k8s-containerd-v2-systemd.txt").read_text()
    )
    logs = tmp_path / "pods"
    (logs / f"inference_vllm-llama-7c9f_{UID}").mkdir(parents=True)
    ident = ProcessIdentities(str(proc), PodDirectory(str(logs))).identify(os.getpid())
    assert ident is not None
    assert (ident.container, ident.runtime, ident.pod_uid) == (SHORT, "containerd", UID)
    assert (ident.namespace, ident.pod) == ("inference", "vllm-llama-7c9f")
