"""The model pods' right to keep their own ``controller.kubernetes.io/pod-deletion-cost``
(:mod:`llmgw_contract.deletion_cost`): a ServiceAccount, a Role that may get and patch pods in the namespace,
its RoleBinding, and the account's token mounted into the registration sidecar only (the pod does not
automount it: the vLLM container gets no token)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

MODEL_ACCOUNT = "llmgw-model"
ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME = "api-token"
NAMESPACE = "llmgw"


def model_rbac() -> list[Obj]:
    """The ServiceAccount, Role and RoleBinding of the model pods."""
    meta = {"name": MODEL_ACCOUNT}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": meta,
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": MODEL_ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": MODEL_ACCOUNT, "namespace": NAMESPACE}],
        },
    ]


def token_volume() -> Obj:
    """The account's token, the cluster's CA and the namespace, as the automounted volume has them."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                    }
                },
            ]
        },
    }


def token_mount() -> Obj:
    return {"name": TOKEN_VOLUME, "mountPath": ACCOUNT_DIR, "readOnly": True}
