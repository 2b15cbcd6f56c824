"""Checking answers against memsvc's OpenAPI document with a JSON Schema validator."""

from __future__ import annotations

import copy
import typing as t

from jsonschema import Draft202012Validator


def operation(doc: dict, procedure: str) -> dict:
    """The operation object of a tRPC procedure (``memory.add``), whatever its method."""
    [op] = doc["paths"][f"/trpc/{procedure}"].values()
    return op


def validator(doc: dict, schema: dict) -> Draft202012Validator:
    """A validator of ``schema``, whose ``#/components/...`` references reach the document's."""
    # Formats are checked too: a timestamp that is not RFC 3339 fails. Objects
    # are held to exactly their described fields (see closed).
    doc = closed(doc)
    schema = copy.deepcopy(schema)
    _closer(doc["components"]["schemas"])(schema)
    root = {**schema, "components": doc["components"]}
    return Draft202012Validator(root, format_checker=Draft202012Validator.FORMAT_CHECKER)


def response_schema(doc: dict, procedure: str, status: int) -> dict:
    """The JSON Schema of a procedure's answer body with ``status``."""
    response = operation(doc, procedure)["responses"][str(status)]
    if "$ref" in response:
        response = doc["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    return response["content"]["application/json"]["schema"]


def input_schema(doc: dict, procedure: str) -> dict:
    """The JSON Schema of a procedure's input: its JSON body or its ``input`` parameter."""
    op = operation(doc, procedure)
    if "requestBody" in op:
        return op["requestBody"]["content"]["application/json"]["schema"]
    [param] = op["parameters"]
    return param["content"]["application/json"]["schema"]


def problems(doc: dict, schema: dict, value: t.Any) -> list[str]:
    """Why ``value`` does not fit ``schema``; empty when it does."""
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator(doc, schema).iter_errors(value)
    ]


def _closer(schemas: dict) -> t.Callable[[t.Any], None]:
    """A function closing every object schema it reaches, components through $refs included."""
    reached: set[str] = set()

    def close(node: t.Any) -> None:
        if isinstance(node, list):
            for item in node:
                close(item)
        if not isinstance(node, dict):
            return
        ref = node.get("$ref", "")
        if ref.startswith("#/components/schemas/") and ref not in reached:
            reached.add(ref)
            close(schemas[ref.rsplit("/", 1)[1]])
        if "properties" in node:
            node.setdefault("additionalProperties", False)
        for value in node.values():
            close(value)

    return close


def closed(doc: dict) -> dict:
    """``doc`` with its answers closed: their objects take exactly the fields they describe.

    The document leaves answers open (a later memsvc may add fields, and a
    client generated today must take them); memsvc's own answers today carry
    exactly what the document describes, and the tests hold them to it.
    """
    doc = copy.deepcopy(doc)
    close = _closer(doc["components"]["schemas"])
    for methods in doc["paths"].values():
        for op in methods.values():
            close(op["responses"])
    close(doc["components"]["responses"])
    return doc
