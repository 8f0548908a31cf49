"""Strategic merge patch, pure: merge keys per field path and every directive."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kubesim.strategic import StrategicPatchError, apply_strategic

POD: dict[str, Any] = {
    "metadata": {"name": "p", "finalizers": ["a"], "labels": {"x": "1"}},
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "busybox:1.36",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80}, {"containerPort": 81}],
            },
            {"name": "side", "image": "busybox:1.36"},
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
    },
}


def test_kubectl_apply_image_change_merges_by_name_and_stores_no_directive() -> None:
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "side"}],
            "containers": [{"name": "app", "image": "busybox:1.37"}],
        }
    }
    out = apply_strategic(POD, patch)
    assert [c["image"] for c in out["spec"]["containers"]] == ["busybox:1.37", "busybox:1.36"]
    assert out["spec"]["containers"][0]["env"] == POD["spec"]["containers"][0]["env"]
    assert "$setElementOrder/containers" not in out["spec"]
    assert POD["spec"]["containers"][0]["image"] == "busybox:1.36"  # input untouched


def test_delete_element_order_and_nested_merge_keys() -> None:
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
            "containers": [
                {
                    "name": "app",
                    "$setElementOrder/env": [{"name": "B"}, {"name": "C"}],
                    "env": [{"name": "C", "value": "3"}, {"$patch": "delete", "name": "A"}],
                    "ports": [{"containerPort": 81, "name": "http"}],
                }
            ],
        }
    }
    out = apply_strategic(POD, patch)
    side, app = out["spec"]["containers"]
    assert side["name"] == "side"
    assert app["env"] == [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}]
    assert app["ports"] == [{"containerPort": 80}, {"containerPort": 81, "name": "http"}]


def test_replace_and_delete_maps_and_lists() -> None:
    patch = {
        "metadata": {"labels": {"$patch": "replace", "y": "2"}},
        "spec": {
            "volumes": [{"$patch": "replace"}, {"name": "w", "emptyDir": {}}],
            "tolerations": [{"key": "other", "operator": "Exists"}],  # no strategy: replaced
        },
    }
    out = apply_strategic(POD, patch)
    assert out["metadata"]["labels"] == {"y": "2"}
    assert out["spec"]["volumes"] == [{"name": "w", "emptyDir": {}}]
    assert out["spec"]["tolerations"] == [{"key": "other", "operator": "Exists"}]
    gone = apply_strategic(POD, {"metadata": {"labels": {"$patch": "delete"}}})
    assert "labels" not in gone["metadata"]


def test_primitive_lists_retain_keys_and_nulls() -> None:
    patch = {
        "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
        "spec": {
            "containers": [
                {"name": "side", "$retainKeys": ["name", "image"], "image": "x", "tty": True}
            ]
        },
    }
    out = apply_strategic(POD, patch)
    assert out["metadata"]["finalizers"] == ["b"]
    assert out["spec"]["containers"][1] == {"name": "side", "image": "x"}
    assert "labels" not in apply_strategic(POD, {"metadata": {"labels": None}})["metadata"]


def test_service_ports_merge_by_port() -> None:
    svc = {"spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]}}
    patch = {
        "spec": {
            "$setElementOrder/ports": [{"port": 81}],
            "ports": [{"port": 81, "targetPort": 8080}, {"$patch": "delete", "port": 80}],
        }
    }
    assert apply_strategic(svc, patch)["spec"] == {"ports": [{"port": 81, "targetPort": 8080}]}


def test_bad_directives_and_missing_merge_keys_are_errors() -> None:
    with pytest.raises(StrategicPatchError, match="Unknown patch type: bogus"):
        apply_strategic(POD, {"metadata": {"$patch": "bogus"}})
    with pytest.raises(StrategicPatchError, match="does not contain declared merge key: name"):
        apply_strategic(POD, {"spec": {"containers": [{"image": "x"}]}})
