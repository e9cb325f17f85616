#!/usr/bin/python3
"""Checks docs/openapi.json: a valid OpenAPI 3.0 document, every example in it valid against
its schema, and real answers of the API (from the openapi_samples program) valid against
the responses the document gives for them, and every field of those real answers shown by
an example of their route and status (check_unshown; UNSHOWN_OK lists the exceptions), so
that the examples keep up with the answers.

Usage: openapi_schema_test.py DOCUMENT SAMPLES_PROGRAM

Needs Debian's python3-jsonschema (scripts/install-deps.sh). The structural checks follow
the OpenAPI 3.0.3 specification (https://spec.openapis.org/oas/v3.0.3): the fixed fields of
each object, required fields, references, path parameters, security requirements. Where
openapi-spec-validator happens to be installed (Debian 12 has no package), it checks too.

"Strict" validation closes every object schema that lists `properties` and says nothing
of `additionalProperties`: an answer with a field the document does not describe fails,
so the document cannot fall behind the code. Clients are not held to that: the published
schemas stay open, and docs/api.md tells readers to ignore fields they do not know.
"""

import copy
import json
import re
import subprocess
import sys

try:
    import jsonschema
except ImportError:
    print("openapi_schema_test: needs python3-jsonschema: run scripts/install-deps.sh "
          "(or apt-get install python3-jsonschema)", file=sys.stderr)
    sys.exit(1)

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

# Fixed fields of the OpenAPI 3.0.3 objects used here; `x-` extensions are allowed anywhere.
FIELDS = {
    "root": {"openapi", "info", "servers", "paths", "components", "security", "tags", "externalDocs"},
    "info": {"title", "description", "termsOfService", "contact", "license", "version"},
    "server": {"url", "description", "variables"},
    "serverVariable": {"enum", "default", "description"},
    "components": {"schemas", "responses", "parameters", "examples", "requestBodies", "headers",
                   "securitySchemes", "links", "callbacks"},
    "pathItem": {"$ref", "summary", "description", "servers", "parameters"} | set(METHODS),
    "operation": {"tags", "summary", "description", "externalDocs", "operationId", "parameters",
                  "requestBody", "responses", "callbacks", "deprecated", "security", "servers"},
    "parameter": {"name", "in", "description", "required", "deprecated", "allowEmptyValue",
                  "style", "explode", "allowReserved", "schema", "example", "examples", "content"},
    "requestBody": {"description", "content", "required"},
    "mediaType": {"schema", "example", "examples", "encoding"},
    "response": {"description", "headers", "content", "links"},
    "header": {"description", "required", "deprecated", "allowEmptyValue", "style", "explode",
               "allowReserved", "schema", "example", "examples", "content"},
    "example": {"summary", "description", "value", "externalValue"},
    "tag": {"name", "description", "externalDocs"},
    "securityScheme": {"type", "description", "name", "in", "scheme", "bearerFormat", "flows",
                       "openIdConnectUrl"},
    "schema": {"title", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
               "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems",
               "maxProperties", "minProperties", "required", "enum", "type", "allOf", "oneOf",
               "anyOf", "not", "items", "properties", "additionalProperties", "description",
               "format", "default", "nullable", "discriminator", "readOnly", "writeOnly", "xml",
               "externalDocs", "example", "deprecated"},
}
SCHEMA_TYPES = {"integer", "number", "string", "boolean", "array", "object"}


class Checker:
    def __init__(self, doc):
        self.doc = doc
        self.errors = []
        self.strict_doc = strictify(copy.deepcopy(doc))

    def fail(self, where, what):
        self.errors.append(f"{where}: {what}")

    # ---- references ----------------------------------------------------------------------
    def resolve(self, ref, where):
        if not ref.startswith("#/"):
            self.fail(where, f"$ref {ref!r} is not a reference inside the document")
            return None
        node = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                self.fail(where, f"$ref {ref!r} points at nothing")
                return None
            node = node[part]
        return node

    def deref(self, obj, where):
        """The object itself, or what its $ref points at (Reference Objects have no siblings)."""
        if isinstance(obj, dict) and "$ref" in obj:
            if len(obj) != 1:
                self.fail(where, f"a Reference Object has other fields, which OpenAPI 3.0 ignores: "
                          f"{sorted(set(obj) - {'$ref'})}")
            return self.resolve(obj["$ref"], where)
        return obj

    def fields(self, obj, kind, where, required=()):
        if not isinstance(obj, dict):
            self.fail(where, f"expected an object ({kind})")
            return False
        for key in obj:
            if key not in FIELDS[kind] and not key.startswith("x-"):
                self.fail(where, f"{key!r} is not a field of a {kind} object")
        for key in required:
            if key not in obj:
                self.fail(where, f"a {kind} object needs {key!r}")
        return True

    # ---- structure ------------------------------------------------------------------------
    def check_document(self):
        d = self.doc
        self.fields(d, "root", "document", ("openapi", "info", "paths"))
        if not re.fullmatch(r"3\.0\.\d+", str(d.get("openapi", ""))):
            self.fail("openapi", f"{d.get('openapi')!r} is not 3.0.x")
        if self.fields(d.get("info", {}), "info", "info", ("title", "version")):
            for key in ("title", "version", "description"):
                if key in d["info"] and not isinstance(d["info"][key], str):
                    self.fail(f"info.{key}", "expected a string")
        for i, server in enumerate(d.get("servers", [])):
            self.fields(server, "server", f"servers[{i}]", ("url",))
            declared = set(re.findall(r"{([^}]+)}", server.get("url", "")))
            for name, var in server.get("variables", {}).items():
                self.fields(var, "serverVariable", f"servers[{i}].variables.{name}", ("default",))
            if declared != set(server.get("variables", {})):
                self.fail(f"servers[{i}]", "the url's {variables} and `variables` differ")
        components = d.get("components", {})
        self.fields(components, "components", "components")
        schemes = components.get("securitySchemes", {})
        for name, scheme in schemes.items():
            where = f"components.securitySchemes.{name}"
            self.fields(scheme, "securityScheme", where, ("type",))
            kind = scheme.get("type")
            if kind not in ("apiKey", "http", "oauth2", "openIdConnect"):
                self.fail(where, f"type {kind!r} is not apiKey, http, oauth2 or openIdConnect")
            if kind == "http" and "scheme" not in scheme:
                self.fail(where, "an http scheme needs `scheme`")
            if kind == "apiKey" and not {"name", "in"} <= set(scheme):
                self.fail(where, "an apiKey scheme needs `name` and `in`")
        self.check_security(d.get("security", []), "security")
        tags = set()
        for i, tag in enumerate(d.get("tags", [])):
            self.fields(tag, "tag", f"tags[{i}]", ("name",))
            if tag.get("name") in tags:
                self.fail(f"tags[{i}]", f"tag {tag.get('name')!r} twice")
            tags.add(tag.get("name"))
        for name, schema in components.get("schemas", {}).items():
            self.check_schema(schema, f"components.schemas.{name}")
        for name, p in components.get("parameters", {}).items():
            self.check_parameter(p, f"components.parameters.{name}")
        for name, r in components.get("responses", {}).items():
            self.check_response(r, f"components.responses.{name}")
        for name, e in components.get("examples", {}).items():
            self.fields(e, "example", f"components.examples.{name}")
            if "value" in e and "externalValue" in e:
                self.fail(f"components.examples.{name}", "value and externalValue are exclusive")
        operation_ids = {}
        for path, item in d.get("paths", {}).items():
            self.check_path(path, item, tags, operation_ids)

    def check_security(self, requirements, where):
        schemes = self.doc.get("components", {}).get("securitySchemes", {})
        if not isinstance(requirements, list):
            self.fail(where, "expected a list of security requirements")
            return
        for i, req in enumerate(requirements):
            for name, scopes in req.items():
                if name not in schemes:
                    self.fail(f"{where}[{i}]", f"{name!r} is no security scheme of components")
                if not isinstance(scopes, list):
                    self.fail(f"{where}[{i}].{name}", "expected a list of scopes")

    def check_path(self, path, item, tags, operation_ids):
        where = f"paths.{path}"
        if not path.startswith("/"):
            self.fail(where, "a path starts with /")
        self.fields(item, "pathItem", where)
        templated = re.findall(r"{([^}/]+)}", path)
        if len(templated) != len(set(templated)):
            self.fail(where, "a path parameter twice in the template")
        common = self.parameters(item.get("parameters", []), where + ".parameters")
        methods = [m for m in METHODS if m in item]
        if not methods:
            self.fail(where, "no operation")
        for method in methods:
            op = item[method]
            at = f"{where}.{method}"
            self.fields(op, "operation", at, ("responses",))
            own = self.parameters(op.get("parameters", []), at + ".parameters")
            params = dict(common)
            params.update(own)
            in_path = {name for (name, where_in) in params if where_in == "path"}
            for name in templated:
                if name not in in_path:
                    self.fail(at, f"the template's {{{name}}} has no path parameter")
            for name in in_path - set(templated):
                self.fail(at, f"path parameter {name!r} is not in the template")
            op_id = op.get("operationId")
            if op_id is not None:
                if op_id in operation_ids:
                    self.fail(at, f"operationId {op_id!r} is also {operation_ids[op_id]}'s")
                operation_ids[op_id] = at
            for tag in op.get("tags", []):
                if tag not in tags:
                    self.fail(at, f"tag {tag!r} is not declared under tags")
            if "security" in op:
                self.check_security(op["security"], at + ".security")
            if "requestBody" in op:
                body = self.deref(op["requestBody"], at + ".requestBody")
                if body is not None and self.fields(body, "requestBody", at + ".requestBody",
                                                    ("content",)):
                    self.check_content(body["content"], at + ".requestBody.content")
            responses = op.get("responses", {})
            if not responses:
                self.fail(at, "an operation needs at least one response")
            if not any(code.startswith("2") for code in responses):
                self.fail(at, "no 2xx response")
            for code, r in responses.items():
                if code != "default" and not re.fullmatch(r"[1-5](\d\d|XX)", code):
                    self.fail(f"{at}.responses", f"{code!r} is not a status code or default")
                self.check_response(r, f"{at}.responses.{code}")

    def parameters(self, params, where):
        out = {}
        for i, p in enumerate(params):
            p = self.deref(p, f"{where}[{i}]")
            if p is None:
                continue
            self.check_parameter(p, f"{where}[{i}]")
            key = (p.get("name"), p.get("in"))
            if key in out:
                self.fail(f"{where}[{i}]", f"parameter {key} twice")
            out[key] = p
        return out

    def check_parameter(self, p, where):
        if "$ref" in p:
            return
        self.fields(p, "parameter", where, ("name", "in"))
        if p.get("in") not in ("query", "header", "path", "cookie"):
            self.fail(where, f"in {p.get('in')!r} is not query, header, path or cookie")
        if p.get("in") == "path" and p.get("required") is not True:
            self.fail(where, "a path parameter needs required: true")
        if ("schema" in p) == ("content" in p):
            self.fail(where, "a parameter needs exactly one of schema and content")
        if "schema" in p:
            self.check_schema(p["schema"], where + ".schema")
        if "example" in p and "examples" in p:
            self.fail(where, "example and examples are exclusive")

    def check_response(self, r, where):
        r = self.deref(r, where)
        if r is None:
            return
        self.fields(r, "response", where, ("description",))
        for name, h in r.get("headers", {}).items():
            h = self.deref(h, f"{where}.headers.{name}")
            if h is not None:
                self.fields(h, "header", f"{where}.headers.{name}")
                if ("schema" in h) == ("content" in h):
                    self.fail(f"{where}.headers.{name}", "a header needs exactly one of schema and content")
        if "content" in r:
            self.check_content(r["content"], where + ".content")

    def check_content(self, content, where):
        if not content:
            self.fail(where, "no media type")
        for media, m in content.items():
            if not re.fullmatch(r"[\w.+-]+/[\w.+*-]+", media):
                self.fail(where, f"{media!r} is not a media type")
            self.fields(m, "mediaType", f"{where}.{media}")
            if "example" in m and "examples" in m:
                self.fail(f"{where}.{media}", "example and examples are exclusive")
            if "schema" in m:
                self.check_schema(m["schema"], f"{where}.{media}.schema")
            for name, e in m.get("examples", {}).items():
                e = self.deref(e, f"{where}.{media}.examples.{name}")
                if e is not None:
                    self.fields(e, "example", f"{where}.{media}.examples.{name}")

    def check_schema(self, s, where):
        if not isinstance(s, dict):
            self.fail(where, "a schema is an object")
            return
        if "$ref" in s:
            self.deref(s, where)
            return
        self.fields(s, "schema", where)
        t = s.get("type")
        if t is not None and t not in SCHEMA_TYPES:
            self.fail(where, f"type {t!r} is not one of OpenAPI's {sorted(SCHEMA_TYPES)}")
        if t == "array" and "items" not in s:
            self.fail(where, "an array schema needs items")
        if "required" in s:
            if not s["required"] or not isinstance(s["required"], list):
                self.fail(where, "required is a non-empty list")
            elif "properties" in s and "oneOf" not in s and "anyOf" not in s:
                for name in s["required"]:
                    if name not in s["properties"] and s.get("additionalProperties") is not True:
                        self.fail(where, f"required {name!r} is not among the properties")
        for name, sub in s.get("properties", {}).items():
            self.check_schema(sub, f"{where}.properties.{name}")
        for key in ("items", "not"):
            if key in s:
                self.check_schema(s[key], f"{where}.{key}")
        if isinstance(s.get("additionalProperties"), dict):
            self.check_schema(s["additionalProperties"], f"{where}.additionalProperties")
        for key in ("allOf", "oneOf", "anyOf"):
            for i, sub in enumerate(s.get(key, [])):
                self.check_schema(sub, f"{where}.{key}[{i}]")
        try:
            jsonschema.Draft4Validator.check_schema(s)
        except jsonschema.SchemaError as e:
            self.fail(where, f"not a valid schema: {e.message}")

    # ---- validation against schemas --------------------------------------------------------
    def validate(self, value, schema, where, strict=True):
        """Validates `value` against an OpenAPI schema (strictly: closed objects)."""
        root = self.strict_doc if strict else self.doc
        resolver = jsonschema.RefResolver(base_uri="", referrer=root)
        if strict:
            schema = strictify(copy.deepcopy(schema))
        validator = jsonschema.Draft4Validator(schema, resolver=resolver)
        try:
            errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        except (jsonschema.exceptions.RefResolutionError,
                jsonschema.exceptions.UnknownType,
                jsonschema.exceptions.UndefinedTypeCheck) as e:  # a broken schema, said above
            self.fail(where, f"cannot validate: {str(e).splitlines()[0]}")
            return
        for e in errors:
            at = "/".join(str(p) for p in e.absolute_path) or "(top)"
            self.fail(where, f"at {at}: {e.message}")

    def check_examples(self):
        """Every example and default in the document against its schema."""
        count = 0

        def walk_schema(s, where):
            nonlocal count
            if not isinstance(s, dict) or "$ref" in s:
                return
            if "example" in s:
                count += 1
                self.validate(s["example"], s, where + ".example")
            if "default" in s:
                count += 1
                self.validate(s["default"], s, where + ".default")
            for name, sub in s.get("properties", {}).items():
                walk_schema(sub, f"{where}.properties.{name}")
            for key in ("items", "not", "additionalProperties"):
                if isinstance(s.get(key), dict):
                    walk_schema(s[key], f"{where}.{key}")
            for key in ("allOf", "oneOf", "anyOf"):
                for i, sub in enumerate(s.get(key, [])):
                    walk_schema(sub, f"{where}.{key}[{i}]")

        def walk_media(content, where, need_example):
            nonlocal count
            for media, m in content.items():
                at = f"{where}.{media}"
                schema = m.get("schema", {})
                walk_schema(schema, at + ".schema")
                examples = []
                if "example" in m:
                    examples.append((at + ".example", m["example"]))
                for name, e in m.get("examples", {}).items():
                    e = self.deref(e, f"{at}.examples.{name}")
                    if e is not None and "value" in e:
                        examples.append((f"{at}.examples.{name}", e["value"]))
                if need_example and not examples:
                    self.fail(at, "no example")
                for ex_where, value in examples:
                    count += 1
                    self.validate(value, schema, ex_where)

        def walk_param(p, where):
            nonlocal count
            p = self.deref(p, where)
            if p is None:
                return
            if "schema" in p:
                walk_schema(p["schema"], where + ".schema")
                if "example" in p:
                    count += 1
                    self.validate(p["example"], p["schema"], where + ".example")

        components = self.doc.get("components", {})
        for name, s in components.get("schemas", {}).items():
            walk_schema(s, f"components.schemas.{name}")
        for name, p in components.get("parameters", {}).items():
            walk_param(p, f"components.parameters.{name}")
        for name, r in components.get("responses", {}).items():
            walk_media(r.get("content", {}), f"components.responses.{name}.content", True)
        for path, item in self.doc.get("paths", {}).items():
            for i, p in enumerate(item.get("parameters", [])):
                walk_param(p, f"paths.{path}.parameters[{i}]")
            for method in METHODS:
                if method not in item:
                    continue
                at = f"paths.{path}.{method}"
                op = item[method]
                for i, p in enumerate(op.get("parameters", [])):
                    walk_param(p, f"{at}.parameters[{i}]")
                if "requestBody" in op:
                    body = self.deref(op["requestBody"], at)
                    walk_media(body.get("content", {}), at + ".requestBody.content", True)
                for code, r in op.get("responses", {}).items():
                    r = self.deref(r, f"{at}.responses.{code}")
                    if r is None or "$ref" in op["responses"][code]:
                        continue  # components.responses are walked above
                    walk_media(r.get("content", {}), f"{at}.responses.{code}.content",
                               code.startswith("2"))
        return count

    def listed_operations(self, routes, listed_in):
        """(fields, op, where) of each "METHOD /path" of `routes`, failing those the document
        does not describe."""
        for route, fields in sorted(routes.items()):
            method, path = route.split(" ", 1)
            op = self.doc["paths"].get(path, {}).get(method.lower())
            where = f"paths.{path}.{method.lower()}"
            if op is None:
                self.fail(where, f"{listed_in} names {route}, which the document does not describe")
                continue
            yield fields, op, where

    def check_shown(self):
        """The fields MUST_SHOW names, each in an example of its route's 2xx answers, and
        none NEVER_SHOWN names in any example of its route."""
        for fields, op, where in self.listed_operations(MUST_SHOW, "MUST_SHOW"):
            shown = set()
            for code in op["responses"]:
                if code.startswith("2"):
                    for value, _ in self.examples_of(op, code, where):
                        shown |= shown_fields(value)
            for field in sorted(fields - shown):
                self.fail(where, f"no example of its 2xx answers shows {field}: add one that does")
        for fields, op, where in self.listed_operations(NEVER_SHOWN, "NEVER_SHOWN"):
            for code in op["responses"]:
                for value, _ in self.examples_of(op, code, where):
                    for field in sorted(fields & shown_fields(value)):
                        self.fail(f"{where}.responses.{code}",
                                  f"an example shows {field}, which this answer never carries")

    def examples_of(self, op, code, where):
        """(value, schema) of each example of the operation's response `code`, every media."""
        r = self.deref(op["responses"].get(code), f"{where}.responses.{code}")
        out = []
        for media, m in (r or {}).get("content", {}).items():
            if "example" in m:
                out.append((m["example"], m.get("schema", {})))
            for name, e in m.get("examples", {}).items():
                e = self.deref(e, f"{where}.responses.{code}.{media}.examples.{name}")
                if e is not None and "value" in e:
                    out.append((e["value"], m.get("schema", {})))
        return out

    def field_paths(self, value, schema, prefix=""):
        """Like shown_fields, but a key of a map (an object whose schema gives its values by
        additionalProperties, not by properties) is "*": a limits answer's users.alice and
        users.bob are both users.*."""
        schema = self.merged(schema)
        out = set()
        if isinstance(value, dict):
            props = schema.get("properties", {})
            extra = schema.get("additionalProperties")
            for key, sub in value.items():
                named = key if key in props or not isinstance(extra, dict) else "*"
                out.add(prefix + named)
                out |= self.field_paths(sub, props.get(key, extra if named == "*" else {}),
                                        prefix + named + ".")
        elif isinstance(value, list):
            for sub in value:
                out |= self.field_paths(sub, schema.get("items", {}), prefix.rstrip(".") + "[].")
        return out

    def merged(self, schema):
        """The schema with its $ref followed and its allOf/oneOf/anyOf branches' properties
        merged in: enough to name a value's fields, not to validate it."""
        schema = self.deref(schema, "field_paths") if isinstance(schema, dict) else {}
        if not isinstance(schema, dict):
            return {}
        branches = [self.merged(b) for k in ("allOf", "oneOf", "anyOf")
                    for b in schema.get(k, [])]
        if not branches:
            return schema
        out = dict(schema)
        out["properties"] = dict(schema.get("properties", {}))
        for b in branches:
            for key, sub in b.get("properties", {}).items():
                out["properties"].setdefault(key, sub)
            for key in ("items", "additionalProperties"):
                if key in b and key not in out:
                    out[key] = b[key]
        return out

    def check_unshown(self, samples):
        """The fields of the real answers that no example of their route and status shows,
        less those UNSHOWN_OK lets go: a new answer field fails here until an example of its
        route shows it. Returns {"METHOD /pattern status": [field, ...]} of what failed."""
        sampled = {}
        for s in samples:
            if not s["content_type"].startswith("application/json"):
                continue
            try:
                body = json.loads(s["body"])
            except ValueError:
                continue  # said by check_samples
            sampled.setdefault((s["method"], s["pattern"], str(s["status"])), []).append(body)
        unshown = {}
        for (method, pattern, status), bodies in sorted(sampled.items()):
            op = self.doc["paths"].get(pattern, {}).get(method.lower())
            if op is None:
                continue  # said by check_samples
            code = next((c for c in (status, status[0] + "XX", "default")
                         if c in op["responses"]), None)
            if code is None:
                continue  # said by check_samples
            where = f"paths.{pattern}.{method.lower()}"
            examples = self.examples_of(op, code, where)
            schema = examples[0][1] if examples else {}
            shown = set()
            for value, example_schema in examples:
                shown |= self.field_paths(value, example_schema)
            real = set()
            for body in bodies:
                real |= self.field_paths(body, schema)
            route = f"{method} {pattern}"
            allowed = UNSHOWN_OK.get(route, set())
            missing = sorted(f for f in real - shown if not let_go(f, allowed))
            if missing:
                unshown[f"{route} {status}"] = missing
                self.fail(f"{where}.responses.{code}",
                          f"the real {status} answer has fields no example shows: "
                          f"{', '.join(missing)} (show them in an example, or list them "
                          f"in UNSHOWN_OK)")
        for route, fields in sorted(UNSHOWN_OK.items()):
            method, pattern = route.split(" ", 1)
            if self.doc["paths"].get(pattern, {}).get(method.lower()) is None:
                self.fail("UNSHOWN_OK", f"names {route}, which the document does not describe")
        return unshown

    def check_samples(self, samples):
        """Real answers against the responses the document gives for their operation."""
        answered = set()
        for i, s in enumerate(samples):
            route = f"{s['method']} {s['path']}"
            where = f"sample {i} ({route} -> {s['status']})"
            item = self.doc["paths"].get(s["pattern"])
            op = item.get(s["method"].lower()) if item else None
            if op is None:
                self.fail(where, f"the document has no operation {s['method']} {s['pattern']}")
                continue
            responses = op["responses"]
            r = responses.get(str(s["status"]), responses.get(f"{str(s['status'])[0]}XX",
                                                               responses.get("default")))
            if r is None:
                self.fail(where, f"status {s['status']} is not among the documented responses "
                          f"{sorted(responses)}")
                continue
            r = self.deref(r, where)
            sent = {h.lower(): v for h, v in s["headers"].items()}
            for name, h in r.get("headers", {}).items():
                h = self.deref(h, where) or {}
                if name.lower() not in sent:
                    self.fail(where, f"the answer has no {name} header")
                    continue
                value = sent[name.lower()]
                if h.get("schema", {}).get("type") == "integer":
                    try:
                        value = int(value)
                    except ValueError:
                        self.fail(where, f"header {name}: {value!r} is not an integer")
                        continue
                self.validate(value, h.get("schema", {}), f"{where} header {name}")
            content = r.get("content", {})
            media = s["content_type"].split(";")[0].strip()
            if media not in content:
                self.fail(where, f"content type {media} is not documented ({sorted(content)})")
                continue
            schema = content[media].get("schema", {})
            if media == "application/json":
                try:
                    body = json.loads(s["body"])
                except ValueError as e:
                    self.fail(where, f"the body is not JSON: {e}")
                    continue
            else:
                body = s["body"]
            self.validate(body, schema, where)
            if 200 <= s["status"] < 300:
                answered.add(f"{s['method']} {s['pattern']}")
        return answered


def strictify(node):
    """Closes every object schema with properties and no word on additionalProperties, and
    says OpenAPI 3.0's `nullable: true` to JSON Schema as a type that admits null."""
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
            node["additionalProperties"] = False
        if node.get("nullable") is True and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        for value in node.values():
            strictify(value)
    elif isinstance(node, list):
        for value in node:
            strictify(value)
    return node


# Routes whose real answers must be among the samples.
MUST_SAMPLE = {"POST /v1/jobs", "GET /v1/jobs", "GET /v1/jobs/{id}", "GET /v1/nodes",
               "GET /v1/openapi.json"}

# Fields of a route's 2xx answers that one of its examples must show ("rows[].own_group":
# in an item of the array "rows"): what sets a row or an answer apart, which a reader of
# the examples would otherwise not know to expect.
MUST_SHOW = {
    "GET /v1/usage": {"by", "rows[].own_group", "rows[].fair_share"},
    "POST /v1/jobs/{id}/exec": {"job_id", "job_name"},
    "GET /v1/exec/{id}": {"job_id", "job_name"},
}

# Fields an example of the route must not show, because the server leaves them out of that
# answer (a reader would expect them): the list of jobs drops each job's environment.
NEVER_SHOWN = {
    "GET /v1/jobs": {"jobs[].env"},
}

# Fields of real answers (openapi_samples) that no example of their route needs to show,
# by route, any status ("rows[].x": in an item of the array "rows"; "users.*.x": in any
# value of the map "users"). Everything else a real answer carries must appear in one of
# its route's examples for that status (check_unshown), so that a new answer field gets
# an example. Keep this list short and say why for each entry.
UNSHOWN_OK = {
    # The document itself: its example shows the top of it; the rest is the document.
    "GET /v1/openapi.json": {"info.description", "servers", "security", "tags", "paths",
                             "components"},
}


def let_go(field, allowed):
    """Whether `field` or a field it is inside ("a" for "a.b", "a[].b") is in `allowed`."""
    ends = [i for i, c in enumerate(field) if c == "."] + [len(field)]
    return any(field[:i].removesuffix("[]") in allowed for i in ends)


def shown_fields(value, prefix=""):
    """The field paths in an example's value: "a", "a.b", "rows[].key"."""
    out = set()
    if isinstance(value, dict):
        for key, sub in value.items():
            out.add(prefix + key)
            out |= shown_fields(sub, prefix + key + ".")
    elif isinstance(value, list):
        for sub in value:
            out |= shown_fields(sub, prefix.rstrip(".") + "[].")
    return out


def self_check_unshown(doc, samples, checker):
    """check_unshown must see a field the server starts to send: one added to each object
    answer, as a new server version would, has to be reported for that route."""
    grown = copy.deepcopy(samples)
    routes = set()
    for s in grown:
        if s["content_type"].startswith("application/json") and s["body"].startswith("{"):
            body = json.loads(s["body"])
            body["x_new_field"] = 1
            s["body"] = json.dumps(body)
            routes.add(f"{s['method']} {s['pattern']} {s['status']}")
    reported = {r for r, fields in Checker(doc).check_unshown(grown).items()
                if "x_new_field" in fields}
    for route in sorted(routes - reported):
        checker.fail("check_unshown", f"a new field in the answer of {route} went unreported")


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    document, samples_program = sys.argv[1], sys.argv[2]
    with open(document, encoding="utf-8") as f:
        doc = json.load(f)
    checker = Checker(doc)
    checker.check_document()
    structure_errors = len(checker.errors)
    print(f"structure: {len(doc.get('paths', {}))} paths, "
          f"{len(doc.get('components', {}).get('schemas', {}))} schemas, "
          f"{structure_errors} problems")

    try:
        from openapi_spec_validator import validate as validate_spec  # not in Debian 12
    except ImportError:
        validate_spec = None
    if validate_spec is not None:
        try:
            validate_spec(doc)
            print("openapi-spec-validator: valid")
        except Exception as e:  # its exceptions differ between versions
            checker.fail("openapi-spec-validator", str(e).splitlines()[0])

    examples = checker.check_examples()
    print(f"examples and defaults: {examples} checked")
    checker.check_shown()

    run = subprocess.run([samples_program], capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        checker.fail("openapi_samples", f"exited {run.returncode}: {run.stderr.strip()}")
    samples = json.loads(run.stdout) if run.stdout.strip() else []
    answered = checker.check_samples(samples)
    unshown = checker.check_unshown(samples)
    self_check_unshown(doc, samples, checker)
    print(f"fields of real answers that no example shows: {sum(map(len, unshown.values()))} "
          f"(UNSHOWN_OK lets {sum(map(len, UNSHOWN_OK.values()))} go)")
    print(f"real answers: {len(samples)} checked, 2xx answers of {len(answered)} routes")
    for route in sorted(MUST_SAMPLE - answered):
        checker.fail("openapi_samples", f"no 2xx answer of {route} among the samples")
    # The routes the server answers come from its route table (api/route_table.cc); the
    # document describes exactly those, with `security: []` exactly on the public ones.
    table = subprocess.run([samples_program, "--routes"], capture_output=True, text=True,
                           timeout=60)
    routes = json.loads(table.stdout) if table.returncode == 0 else []
    if table.returncode != 0:
        checker.fail("openapi_samples --routes", f"exited {table.returncode}: {table.stderr}")
    routed = {f"{r['method']} {r['pattern']}" for r in routes}
    documented = {f"{m.upper()} {p}" for p, item in doc["paths"].items() for m in METHODS if m in item}
    for route in sorted(routed - documented):
        checker.fail("paths", f"the route table has {route}, which the document does not describe")
    for route in sorted(documented - routed):
        checker.fail("paths", f"the document describes {route}, which no route answers")
    for r in routes:
        op = doc["paths"].get(r["pattern"], {}).get(r["method"].lower(), {})
        if (op.get("security") == []) != r["public"]:
            checker.fail(f"paths.{r['pattern']}.{r['method'].lower()}",
                         "security: [] exactly where the route is public (answers anyone)")
    print(f"route table: {len(routes)} routes")
    unsampled = sorted(routed - answered)
    if unsampled:
        print(f"routes without a real 2xx answer in the samples: {', '.join(unsampled)}")

    for e in checker.errors:
        print(f"FAIL {e}", file=sys.stderr)
    if checker.errors:
        print(f"{len(checker.errors)} problems with {document}", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
