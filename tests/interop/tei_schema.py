"""TEI's published OpenAPI schemas (the fixtures/tei_openapi_*.json files,
copied from text-embeddings-inference's docs/openapi.json) as JSON Schema
checks, shared by the TEI route tests."""
import json
import os

import jsonschema

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def as_json_schema(node):
    """OpenAPI 3.0's `nullable: true` as JSON Schema's type [T, "null"]."""
    if isinstance(node, dict):
        node = {k: as_json_schema(v) for k, v in node.items()}
        if node.pop("nullable", False) and "type" in node:
            node["type"] = [node["type"], "null"]
        return node
    if isinstance(node, list):
        return [as_json_schema(v) for v in node]
    return node


def load_spec(name):
    """fixtures/tei_openapi_NAME.json, nullable fields made JSON Schema."""
    with open(os.path.join(FIXTURES, f"tei_openapi_{name}.json")) as f:
        return as_json_schema(json.load(f))


def check_schema(body, name, spec):
    """Validates `body` against the spec's components/schemas/NAME."""
    schema = {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    jsonschema.validate(body, schema)
