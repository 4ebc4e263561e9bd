"""Custom resources checked against their CustomResourceDefinitions the way the Kubernetes API
server checks them on create, without a cluster: the CRD's `openAPIV3Schema` (a structural
schema) as JSON Schema, the defaults applied first, and the `x-kubernetes-validations` CEL
rules evaluated with cel-python.

How the API server's behaviour is emulated (Kubernetes docs, "Extend the Kubernetes API with
CustomResourceDefinitions": "Specifying a structural schema", "Field pruning", "Defaulting",
"Validation rules"):
- An object schema with `properties` and without `x-kubernetes-preserve-unknown-fields: true`
  gets `additionalProperties: false`. The API server prunes unknown fields, and with strict
  field validation (kubectl's default since 1.27) it rejects them; without this a misspelt
  field would pass.
- `default`s are applied before validation, as the API server defaults what it decodes.
- `nullable: true` admits null; `x-kubernetes-int-or-string` admits an integer or a string.
- `x-kubernetes-list-type: map` needs its `x-kubernetes-list-map-keys` unique, `set` its items.
- Every CEL rule whose node is present is evaluated with `self` bound to that node. A rule that
  reads `oldSelf` is a transition rule, which does not apply on create, and is not evaluated.
  A rule cel-python cannot evaluate is reported as a violation, never passed: the API server
  would reject on an evaluation error too.
- `metadata` is only `type: object` in a CRD; the name and namespace are checked here as the
  API server checks them (RFC 1123 subdomain and label).
Not emulated: CEL cost limits, `format` checks, `messageExpression`, and admission webhooks or
ValidatingAdmissionPolicies a controller may install.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import celpy
import jsonschema
import yaml
from celpy import celtypes


@dataclass
class Crd:
    api_version: str
    kind: str
    served: bool
    schema: dict
    source: str


def load_crds(directory: Path) -> dict[tuple[str, str], Crd]:
    """Every version of every CRD in the directory's YAML files, by (apiVersion, kind)."""
    crds: dict[tuple[str, str], Crd] = {}
    # libyaml's parser: the CRDs are 50,000 lines, half a minute for the pure-Python one.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=loader):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                api_version = f"{spec['group']}/{version['name']}"
                crds[(api_version, spec["names"]["kind"])] = Crd(
                    api_version, spec["names"]["kind"], version.get("served", False),
                    version["schema"]["openAPIV3Schema"], path.name)
    return crds


def to_json_schema(node: dict, structural: bool = True) -> dict:
    """The structural schema as a Draft 4 JSON Schema (OpenAPI 3.0's base). Only structural
    nodes (reached through properties, items, additionalProperties) get additionalProperties
    false: the allOf/anyOf/oneOf/not branches only add value checks to their node's fields."""
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: to_json_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(branch, structural=False) for branch in value]
        elif key == "not":
            out[key] = to_json_schema(value, structural=False)
        else:
            out[key] = value
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (structural and "properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _children(schema: dict, value):
    """(schema, value, path suffix) of each structural child of a value."""
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is not None:
            for name, child in props.items():
                if name in value:
                    yield child, value[name], f".{name}"
        elif isinstance(schema.get("additionalProperties"), dict):
            for name, item in value.items():
                yield schema["additionalProperties"], item, f"[{name!r}]"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield schema["items"], item, f"[{i}]"


def apply_defaults(schema: dict, value) -> None:
    """Sets, in place, each absent field that has a `default` in an object that is present."""
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
    for child, item, _ in _children(schema, value):
        apply_defaults(child, item)


# Kubernetes' CEL string library (k8s.io/apiserver/pkg/cel/library, "Strings"): the functions
# the CRDs' rules call that are not in CEL's standard library, and so not in cel-python.
def _ascii(text: str, upper: bool) -> celtypes.StringType:
    return celtypes.StringType("".join(
        (c.upper() if upper else c.lower()) if c.isascii() else c for c in text))


K8S_FUNCTIONS = {
    "upperAscii": lambda s: _ascii(s, upper=True),
    "lowerAscii": lambda s: _ascii(s, upper=False),
    "trim": lambda s: celtypes.StringType(s.strip(" \t\n\r\v\f")),
    "split": lambda s, sep, *limit: celtypes.ListType(
        [celtypes.StringType(p) for p in (s.split(sep, int(limit[0]) - 1) if limit and int(limit[0]) > 0 else s.split(sep))]),
}

_CEL_ENV = celpy.Environment()
_PROGRAMS: dict[str, object] = {}


def evaluate_rule(rule: str, value) -> tuple[bool, str | None]:
    """(holds, why it could not be evaluated)."""
    program = _PROGRAMS.get(rule)
    if program is None:
        program = _PROGRAMS[rule] = _CEL_ENV.program(_CEL_ENV.compile(rule), functions=K8S_FUNCTIONS)
    try:
        result = program.evaluate({"self": celpy.json_to_cel(value)})
    except Exception as e:  # noqa: BLE001 - any failure to evaluate is the rule not holding
        return False, f"{type(e).__name__}: {e}"
    if isinstance(result, celpy.CELEvalError):
        return False, f"CELEvalError: {result.args}"
    if not isinstance(result, celtypes.BoolType):
        return False, f"the rule gave {result!r}, not a bool"
    return bool(result), None


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    rules_held: int = 0
    transition_rules: int = 0


def _check_lists_and_rules(schema: dict, value, path: str, report: Report) -> None:
    list_type = schema.get("x-kubernetes-list-type")
    if isinstance(value, list) and list_type in ("map", "set"):
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen = [tuple(item.get(k) for k in keys) if list_type == "map" else repr(item) for item in value]
        dupes = {s for s in seen if seen.count(s) > 1}
        if dupes:
            report.errors.append(f"{path}: duplicate entries {sorted(map(str, dupes))} in a list of type {list_type}")
    for rule in schema.get("x-kubernetes-validations", []):
        if re.search(r"\boldSelf\b", rule["rule"]):
            report.transition_rules += 1
            continue
        holds, problem = evaluate_rule(rule["rule"], value)
        if holds:
            report.rules_held += 1
        elif problem:
            report.errors.append(f"{path}: rule {rule['rule']!r} could not be evaluated ({problem})")
        else:
            report.errors.append(f"{path}: {rule.get('message') or rule['rule']}")
    for child, item, suffix in _children(schema, value):
        _check_lists_and_rules(child, item, path + suffix, report)


DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def validate(doc: dict, crds: dict[tuple[str, str], Crd]) -> Report:
    """Everything the API server would object to on `kubectl create` of `doc`."""
    report = Report()
    crd = crds.get((doc.get("apiVersion"), doc.get("kind")))
    if crd is None:
        report.errors.append(f"no CRD defines {doc.get('kind')} in {doc.get('apiVersion')}")
        return report
    if not crd.served:
        report.errors.append(f"{crd.api_version} of {crd.kind} is not served ({crd.source})")
    meta = doc.get("metadata") or {}
    name, namespace = meta.get("name", ""), meta.get("namespace")
    if not (len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name)):
        report.errors.append(f"metadata.name {name!r} is not an RFC 1123 subdomain")
    if namespace is not None and not (len(namespace) <= 63 and DNS_LABEL.fullmatch(namespace)):
        report.errors.append(f"metadata.namespace {namespace!r} is not an RFC 1123 label")

    obj = copy.deepcopy(doc)
    apply_defaults(crd.schema, obj)
    validator = jsonschema.Draft4Validator(to_json_schema(crd.schema))
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        report.errors.append(f"{where or '.'}: {error.message}")
    if not report.errors:
        # The API server runs CEL rules only on an object the schema accepted.
        _check_lists_and_rules(crd.schema, obj, "", report)
    return report
