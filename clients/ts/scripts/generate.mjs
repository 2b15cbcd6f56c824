#!/usr/bin/env node
// Writes src/generated.ts from memsvc's OpenAPI document: a TypeScript type for
// every schema of the document and the AppRouter type, a tRPC router whose
// procedures take and return exactly those types.
//
//   node scripts/generate.mjs http://127.0.0.1:8000/openapi.json   (a running memsvc)
//   node scripts/generate.mjs openapi.json [out.ts]                 (a saved document)
//
// The committed src/generated.ts comes from a server with default settings
// (limits and defaults appear in the comments); memsvc's tests fail when it
// differs from what the current server's document gives.

import { readFile, writeFile } from "node:fs/promises";

const [source, out = new URL("../src/generated.ts", import.meta.url)] = process.argv.slice(2);
if (!source) {
  console.error("usage: node scripts/generate.mjs <openapi.json URL or file> [out.ts]");
  process.exit(2);
}

const doc = /^https?:/.test(source)
  ? await (await fetch(source)).json()
  : JSON.parse(await readFile(source, "utf8"));

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const SCALARS = { string: "string", integer: "number", number: "number", boolean: "boolean", null: "null" };

function refName(ref) {
  const prefix = "#/components/schemas/";
  if (!ref.startsWith(prefix)) throw new Error(`unsupported $ref ${ref}`);
  return ref.slice(prefix.length);
}

function union(types) {
  const unique = [...new Set(types)];
  return unique.length === 1 ? unique[0] : unique.map((t) => (t.includes("=>") ? `(${t})` : t)).join(" | ");
}

function indent(text, by) {
  return text.replace(/\n/g, `\n${by}`);
}

// What a reader should know that the type cannot say.
function notes(schema) {
  const out = [];
  if (schema.description) out.push(schema.description);
  const limits = [];
  const range = (low, high, unit) =>
    low !== undefined && high !== undefined
      ? `${low} to ${high}${unit}`
      : low !== undefined
        ? `at least ${low}${unit}`
        : `at most ${high}${unit}`;
  if (schema.minLength !== undefined || schema.maxLength !== undefined) {
    limits.push(range(schema.minLength, schema.maxLength, " characters"));
  }
  if (schema.minimum !== undefined || schema.maximum !== undefined) {
    limits.push(range(schema.minimum, schema.maximum, ""));
  }
  if (schema.exclusiveMinimum !== undefined) limits.push(`over ${schema.exclusiveMinimum}`);
  if (schema.exclusiveMaximum !== undefined) limits.push(`under ${schema.exclusiveMaximum}`);
  if (schema.format) limits.push(`format: ${schema.format}`);
  if (limits.length) out.push(`${limits.join(", ")}.`);
  if (schema.default !== undefined) out.push(`@default ${JSON.stringify(schema.default)}`);
  return out;
}

function comment(lines, pad = "") {
  if (!lines.length) return "";
  const text = lines.join("\n").replace(/\*\//g, "*\\/").split("\n");
  if (text.length === 1) return `${pad}/** ${text[0]} */\n`;
  return `${pad}/**\n${text.map((l) => `${pad} * ${l}`.trimEnd()).join("\n")}\n${pad} */\n`;
}

// Whether the types being written describe a procedure's input: an optional
// field of an input also takes \`undefined\`, which JSON leaves out, so that
// \`{ limit: options.limit }\` compiles under exactOptionalPropertyTypes.
let describingInput = false;

function objectType(schema, pad) {
  const required = new Set(schema.required ?? []);
  const lines = [];
  for (const [name, prop] of Object.entries(schema.properties ?? {})) {
    const key = IDENTIFIER.test(name) ? name : JSON.stringify(name);
    const optional = required.has(name) ? "" : "?";
    const orUndefined = optional && describingInput ? " | undefined" : "";
    lines.push(comment(notes(prop), pad + "  ") + `${pad}  ${key}${optional}: ${type(prop, pad + "  ")}${orUndefined};`);
  }
  const extra = schema.additionalProperties;
  // Absent or false: exactly these fields, so TypeScript flags a misspelt one.
  if (extra === true || (extra && typeof extra === "object")) {
    const value = extra === true || schema.properties ? "unknown" : type(extra, pad + "  ");
    lines.push(`${pad}  [key: string]: ${value};`);
  }
  // No fields and no others: only {} (TypeScript's {} would take any value but null).
  return lines.length ? `{\n${lines.join("\n")}\n${pad}}` : "Record<string, never>";
}

function type(schema, pad = "") {
  if (schema === true || schema === undefined) return "unknown";
  if (schema.$ref) return refName(schema.$ref);
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.enum) return union(schema.enum.map((v) => JSON.stringify(v)));
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives) return union(alternatives.map((s) => type(s, pad)));
  const kinds = Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [];
  if (!kinds.length) return "unknown";
  return union(
    kinds.map((kind) => {
      if (kind in SCALARS) return SCALARS[kind];
      if (kind === "array") {
        const items = type(schema.items, pad);
        return /^[A-Za-z0-9_]+$/.test(items) ? `${items}[]` : `Array<${items}>`;
      }
      if (kind === "object") return objectType(schema, pad);
      throw new Error(`unsupported type ${kind}`);
    }),
  );
}

function declaration(name, schema) {
  describingInput = inputSchemas.has(name);
  const body = type(schema);
  const doc = comment(notes(schema));
  if (body.startsWith("{") && !(schema.anyOf || schema.oneOf || Array.isArray(schema.type))) {
    return `${doc}export interface ${name} ${body}\n`;
  }
  return `${doc}export type ${name} = ${body};\n`;
}

// -- procedures: the router tree from the operations' x-trpc-procedure -------------

const procedures = [];
for (const methods of Object.values(doc.paths)) {
  for (const op of Object.values(methods)) {
    const path = op["x-trpc-procedure"];
    if (!path) continue;
    const kind = op["x-trpc-type"];
    const carrier = op.requestBody ?? op.parameters?.find((p) => p.name === "input");
    const input = carrier?.content?.["application/json"]?.schema;
    // An input the document does not require may be left out: \`.query()\`.
    const optional = carrier !== undefined && !carrier.required;
    const output = op.responses["200"].content["application/json"].schema.properties.result.properties.data;
    procedures.push({ path, kind, input, optional, output, summary: op.summary });
  }
}
procedures.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));

// The components that procedures' inputs are made of, directly or through others.
const inputSchemas = new Set();
function collectInputs(schema) {
  if (Array.isArray(schema)) return schema.forEach(collectInputs);
  if (!schema || typeof schema !== "object") return;
  if (typeof schema.$ref === "string") {
    const name = refName(schema.$ref);
    if (inputSchemas.has(name)) return;
    inputSchemas.add(name);
    return collectInputs(doc.components.schemas[name]);
  }
  Object.values(schema).forEach(collectInputs);
}
procedures.forEach((proc) => collectInputs(proc.input));

const tree = {};
for (const proc of procedures) {
  const parts = proc.path.split(".");
  let node = tree;
  for (const part of parts.slice(0, -1)) node = node[part] ??= {};
  node[parts.at(-1)] = proc;
}

function routerCode(node, pad) {
  const lines = Object.entries(node).map(([name, child]) => {
    const key = IDENTIFIER.test(name) ? name : JSON.stringify(name);
    if (!child.kind) return `${pad}  ${key}: t.router(${routerCode(child, pad + "  ")}),`;
    describingInput = true;
    const inputType = child.input && indent(type(child.input, pad + "  "), "") + (child.optional ? " | undefined" : "");
    const input = child.input ? `.input(is<${inputType}>())` : "";
    return `${pad}  ${key}: t.procedure${input}.${child.kind}(served<${type(child.output, pad + "  ")}>()),`;
  });
  return `{\n${lines.join("\n")}\n${pad}}`;
}

const schemas = doc.components.schemas;
const text = `// Generated from memsvc's OpenAPI document (GET /openapi.json) by scripts/generate.mjs.
// Do not edit: run \`npm run generate -- <URL of a memsvc's /openapi.json>\`.

import { initTRPC } from "@trpc/server";

${Object.entries(schemas)
  .map(([name, schema]) => declaration(name, schema))
  .join("\n")}
// -- the router ------------------------------------------------------------------

const t = initTRPC.create();

// A parser that only carries a type: this router is never run, memsvc is the server.
const is =
  <T>() =>
  (value: unknown): T =>
    value as T;
const served =
  <T>() =>
  (): T => {
    throw new Error("memsvc's procedures run on the memsvc server");
  };

const appRouter = t.router(${routerCode(tree, "")});

/** memsvc's procedures with their input and output types, for \`createTRPCClient<AppRouter>\`. */
export type AppRouter = typeof appRouter;

`;

await writeFile(out, text);
