"""Checking answers against memsvc's OpenAPI document with a JSON Schema validator."""

from __future__ import annotations

import typing as t

from jsonschema import Draft202012Validator


def operation(doc: dict, procedure: str) -> dict:
    """The operation object of a tRPC procedure (``memory.add``), whatever its method."""
    [op] = doc["paths"][f"/trpc/{procedure}"].values()
    return op


def validator(doc: dict, schema: dict) -> Draft202012Validator:
    """A validator of ``schema``, whose ``#/components/...`` references reach the document's."""
    # Formats are checked too: a timestamp that is not RFC 3339 fails.
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
