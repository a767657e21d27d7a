"""JSON Schemas for the custom resources the chart renders, which Kubernetes' own schemas lack.

Each is the part of the CRD's openAPIV3Schema that the chart uses, written out from the CRDs of
KEDA 2.x (keda.sh/v1alpha1 ScaledObject, TriggerAuthentication) and the Prometheus Operator
(monitoring.coreos.com/v1 ServiceMonitor). Unknown fields are rejected, as the API server does with
a structural schema and field validation on.
"""

from __future__ import annotations

from typing import Any

# Prometheus Operator's Duration type.
_DURATION = (
    "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
_INT32 = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
_NAME = {"type": "string", "minLength": 1, "maxLength": 253}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}

_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _NAME, "labels": _LABELS, "annotations": _LABELS},
}

# What each scaler refuses to start without (KEDA's scalers parse these from the metadata; the
# admission webhook rejects a ScaledObject whose scaler cannot be built).
_TRIGGER_REQUIRED = {
    "kafka": ["bootstrapServers", "consumerGroup"],
    "prometheus": ["serverAddress", "query", "threshold"],
}

SCALED_OBJECT: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": _NAME,
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "pollingInterval": _INT32,
                "cooldownPeriod": _INT32,
                "initialCooldownPeriod": _INT32,
                "idleReplicaCount": _INT32,
                "minReplicaCount": _INT32,
                "maxReplicaCount": _INT32,
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "behavior": {"type": "object"},
                            },
                        },
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type", "metadata"],
                        "allOf": [
                            {
                                "if": {"properties": {"type": {"const": kind}}},
                                "then": {"properties": {"metadata": {"required": required}}},
                            }
                            for kind, required in _TRIGGER_REQUIRED.items()
                        ],
                        "properties": {
                            "type": {"type": "string"},
                            "name": {"type": "string"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            # map[string]string in the CRD: every value must be a string.
                            "metadata": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                            "authenticationRef": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["name"],
                                "properties": {
                                    "name": _NAME,
                                    "kind": {
                                        "enum": [
                                            "TriggerAuthentication",
                                            "ClusterTriggerAuthentication",
                                        ]
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}

TRIGGER_AUTHENTICATION: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "TriggerAuthentication"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "secretTargetRef": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["parameter", "name", "key"],
                        "properties": {
                            "parameter": {"type": "string", "minLength": 1},
                            "name": _NAME,
                            "key": {"type": "string", "minLength": 1},
                        },
                    },
                },
            },
        },
    },
}

SERVICE_MONITOR: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector"],
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": _LABELS,
                        "matchExpressions": {"type": "array"},
                    },
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": _DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                            "honorLabels": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    },
}

BY_KIND = {
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("keda.sh/v1alpha1", "TriggerAuthentication"): TRIGGER_AUTHENTICATION,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
}
