"""specmon.state.groups: which group a target's past belongs to, the strict checks of
``group_labels``, and where a new member finds its past."""

from __future__ import annotations

import pytest

from specmon.state.groups import Groups, check_group_labels, group_of

KUBE = {"namespace": "llm", "service": "llama", "job": "llama", "pod": "llama-7d9f-abcde",
        "container": "server", "endpoint": "http"}  # fmt: skip


def test_the_default_names_the_namespace_and_the_role() -> None:
    # kube-prometheus-stack ServiceMonitor labels: the Service is the role (not the pod).
    assert group_of(KUBE, None) == "namespace=llm,service=llama"
    new_pod = {**KUBE, "pod": "llama-55c4-vwxyz"}
    assert group_of(new_pod, None) == group_of(KUBE, None)
    # A relabelled pod's controller label wins over the Service.
    assert group_of({**KUBE, "app_kubernetes_io_instance": "llama-k4"}, None) == (
        "namespace=llm,app_kubernetes_io_instance=llama-k4"
    )
    assert group_of({"app": "llama"}, None) == "app=llama"  # file_sd, no namespace
    assert group_of({"cluster": "eu"}, None) == ""  # no role label: the name's own past
    # A job alone names no role: one job often scrapes many different servers.
    assert group_of({"namespace": "llm", "job": "vllm"}, None) == ""
    assert group_of(KUBE, ()) == ""  # group_labels: [] turns groups off


def test_configured_labels_must_all_be_there() -> None:
    assert group_of(KUBE, ("namespace", "job")) == "namespace=llm,job=llama"
    assert group_of(KUBE, ("namespace", "deployment")) == ""
    assert group_of({**KUBE, "job": ""}, ("job",)) == ""


@pytest.mark.parametrize(
    ("value", "instance_labels", "problem"),
    [
        ("namespace", (), "must be a list"),
        (["namespace", 3], (), "3 is not a label name"),
        (["name-space"], (), "not a label name"),
        (["job", "job"], (), "listed twice"),
        (["namespace", "pod"], (), "names one pod"),
        (["instance"], (), "names one pod"),
        ([f"l{i}" for i in range(9)], (), "at most 8"),
        (["namespace", "service"], ("namespace", "service"), "every one of instance_labels"),
    ],
)
def test_group_labels_are_checked(
    value: object, instance_labels: tuple[str, ...], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        check_group_labels(value, instance_labels=instance_labels)


def test_group_labels_taken() -> None:
    assert check_group_labels(None) is None
    assert check_group_labels([]) == ()
    assert check_group_labels(["namespace", "service"], instance_labels=("namespace", "pod")) == (
        "namespace",
        "service",
    )


def test_a_new_member_finds_a_live_member_then_the_last_departed() -> None:
    groups: Groups[str] = Groups(max_departed=2)
    assert groups.donor("g", name="a") is None
    groups.join("g", "a", "A")
    groups.join("g", "b", "B")
    assert groups.donor("g", name="c") == "B"  # the newest live member
    assert groups.donor("g", name="b") == "A"  # never itself
    assert groups.leave("b") == "g"
    assert groups.leave("a") == "g"
    assert groups.live_groups() == frozenset()
    assert groups.donor("g", name="c") == "A"  # the last to leave
    groups.join("g", "c", "C")
    assert groups.donor("g", name="d") == "C"
    assert groups.leave("nobody") is None


def test_departed_groups_are_bounded_and_a_member_moves_between_groups() -> None:
    groups: Groups[str] = Groups(max_departed=2)
    for name in ("g1", "g2", "g3"):
        groups.join(name, f"m-{name}", name.upper())
        groups.leave(f"m-{name}")
    assert groups.donor("g1", name="x") is None  # the oldest let go
    assert groups.donor("g3", name="x") == "G3"
    groups.join("h1", "m", "M")
    groups.join("h2", "m", "M2")  # its labels changed: it left h1
    assert groups.group("m") == "h2" and groups.donor("h1", name="x") == "M"
