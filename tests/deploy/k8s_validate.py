"""Validate Kubernetes manifests; run by the tests with the tools venv's Python (tools.py).

    python k8s_validate.py VERSION[,VERSION...] FILE...

Prints one JSON object per document: file, index, kind, name, the schema that checked it
("kubernetes X.Y (strict)" or "prometheus-operator v0.80.1 CRD (strict)") and its errors
(empty when valid). Built-in kinds are checked with kubernetes-validate's strict schemas for
every VERSION; monitoring.coreos.com/v1 kinds against the JSON schema of
cloudcoil-models-prometheus-operator's models (generated from the operator's CRDs), made
strict: an object schema with properties rejects any other property. A kind with no schema is
an error, not a skip.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from cloudcoil.models.prometheus_operator import v1 as monitoring_v1

CRD_MODELS = {
    "ServiceMonitor": monitoring_v1.ServiceMonitor,
    "PodMonitor": monitoring_v1.PodMonitor,
    "PrometheusRule": monitoring_v1.PrometheusRule,
}


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {key: _strict(value) for key, value in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


def _crd_errors(document: dict[str, Any]) -> list[str]:
    model = CRD_MODELS[document["kind"]]
    schema = _strict(model.model_json_schema(by_alias=True, mode="validation"))
    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for error in validator.iter_errors(document):
        # Optional fields are anyOf(the schema, null): report the branch that went deepest.
        while error.context:
            error = max(error.context, key=lambda e: len(e.absolute_path))
        where = ".".join(str(p) for p in error.absolute_path) or "<root>"
        out.append(f"{where}: {error.message[:300]}")
    return sorted(out)


def main(argv: list[str]) -> int:
    versions = argv[0].split(",")
    for path in argv[1:]:
        with open(path, encoding="utf-8") as handle:
            documents = [d for d in yaml.safe_load_all(handle) if d is not None]
        for index, document in enumerate(documents):
            kind = document.get("kind", "")
            name = (document.get("metadata") or {}).get("name", "")
            base = {"file": path, "index": index, "kind": kind, "name": name}
            if document.get("apiVersion") == "monitoring.coreos.com/v1" and kind in CRD_MODELS:
                print(
                    json.dumps(
                        {
                            **base,
                            "schema": "prometheus-operator v0.80.1 CRD (strict)",
                            "errors": _crd_errors(document),
                        }
                    )
                )
                continue
            for version in versions:
                errors: list[str] = []
                try:
                    kubernetes_validate.validate(document, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    where = ".".join(str(p) for p in exc.path) or "<root>"
                    errors.append(f"{where}: {exc.message}")
                except kubernetes_validate.SchemaNotFoundError as exc:
                    errors.append(f"no schema: {exc.message}")
                print(
                    json.dumps(
                        {**base, "schema": f"kubernetes {version} (strict)", "errors": errors}
                    )
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
