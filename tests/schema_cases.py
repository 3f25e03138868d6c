"""Hand-written JSON Schemas with valid and invalid instances, shared by the schema and stitching tests."""

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "nickname": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "address": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city"], "additionalProperties": False},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
FUNCTION_CALL = {
    "type": "object",
    "properties": {
        "name": {"const": "get_weather"},
        "arguments": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                           "days": {"type": "integer", "exclusiveMinimum": 0, "maximum": 14}},
            "required": ["location"],
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
ORDER = {
    "$defs": {"item": {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
                                                        "quantity": {"type": "integer", "minimum": 1},
                                                        "price": {"type": "number", "minimum": 0}},
                       "required": ["sku", "quantity", "price"], "additionalProperties": False}},
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "format": "uuid"},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1},
        "status": {"anyOf": [{"enum": ["paid", "shipped"]}, {"type": "null"}]},
        "note": {"type": "string"},
        "shipped": {"type": "string", "format": "date-time"},
    },
    "required": ["order_id", "items"],
}
TREE = {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                                                            "children": {"type": "array",
                                                                         "items": {"$ref": "#/$defs/node"}}},
                           "required": ["value"], "additionalProperties": False}},
        "$ref": "#/$defs/node"}
ONE_OF = {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                     "required": ["kind", "r"], "additionalProperties": False},
                    {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                     "required": ["kind", "side"], "additionalProperties": False}]}
LABELS = {"type": "object",  # keys by pattern, decimal bounds
          "properties": {"service": {"type": "string", "maxLength": 20},
                         "cpus": {"type": "number", "minimum": 0.01, "exclusiveMaximum": 64.5},
                         "replicas": {"type": "number", "multipleOf": 1},
                         "limits": {"type": "object", "minProperties": 1}},
          "patternProperties": {"^x-[a-z]+$": {"type": "integer", "minimum": 0}, "^[0-9]{2}$": {"type": "boolean"}},
          "required": ["service", "cpus"], "additionalProperties": False}
OPEN_KEYS = {"type": "object",  # keys by an open-ended pattern (its region's regex names the surrogates it excludes)
             "properties": {"_id": {"type": "string"}},
             "patternProperties": {"^[A-Za-z]": {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}},
             "additionalProperties": False}
AREA = {"type": "object",  # Glaive's overlapping oneOf: exactly one branch's names present
        "properties": {"radius": {"type": "number"}, "length": {"type": "number"}, "width": {"type": "number"}},
        "oneOf": [{"required": ["radius"]}, {"required": ["length", "width"]}]}
SCHEMAS = {"person": PERSON, "function": FUNCTION_CALL, "order": ORDER, "tree": TREE, "oneOf": ONE_OF,
           "labels": LABELS, "open_keys": OPEN_KEYS, "area": AREA}

VALID = {
    "person": [{"name": "Ada Lovelace", "age": 36}, {"name": "Zoë", "age": 0, "nickname": None, "tags": []},
               {"name": "x: y #z", "age": 150, "email": "ada@example.org", "tags": ["a", "b c", "yes"],
                "address": {"city": "London", "zip": "01234"}}],
    "function": [{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius", "days": 3}},
                 {"name": "get_weather", "arguments": {"location": "New York, NY", "extra": [1, {"a": None}]}}],
    "order": [{"order_id": "123e4567-e89b-12d3-a456-426614174000",
               "items": [{"sku": "ABC-1", "quantity": 2, "price": 9.99}, {"sku": "XYZ-42", "quantity": 1, "price": 0}],
               "status": "paid", "note": "leave at door", "shipped": "2024-05-01T12:00:00Z"},
              {"order_id": "00000000-0000-0000-0000-000000000000", "items": [{"sku": "QQQ-7", "quantity": 9,
                                                                              "price": 1e-05}],
               "status": None, "gift": True}],
    "tree": [{"value": 1}, {"value": -3, "children": [{"value": 4, "children": []}, {"value": 5}]}],
    "oneOf": [{"kind": "circle", "r": 1.5}, {"kind": "square", "side": 2}],
    "open_keys": [{}, {"_id": "a"}, {"_id": "a", "Ab": 1, "z": True}, {"q\"uote": -2}],
    "area": [{"radius": 1}, {"length": 2, "width": 3}, {"radius": 1, "length": 2}],
    "labels": [{"service": "web", "cpus": 0.01}, {"service": "db", "cpus": 64.4, "x-replicas": 3, "42": True},
               {"service": "a: b", "cpus": 1, "x-b": 0, "x-c": 7, "00": False},
               {"service": "w", "cpus": 2, "replicas": 3, "limits": {"memory": "1G"}}],
}
INVALID = {
    "person": [{"name": "", "age": 3}, {"name": "A", "age": -1}, {"name": "A", "age": 151}, {"name": "A"},
               {"name": "A", "age": 3, "tags": ["a", "b", "c", "d"]}, {"name": "A", "age": 3, "extra": 1},
               {"name": "A", "age": 3, "address": {"zip": "12345"}}, {"name": "A", "age": 3.5},
               {"name": "A", "age": 3, "address": {"city": "B", "zip": "1234"}}, {"name": "A" * 41, "age": 3},
               {"name": "A", "age": 3, "nickname": 7}],
    "function": [{"name": "get_time", "arguments": {"location": "Paris"}},
                 {"name": "get_weather", "arguments": {"location": "Paris", "unit": "kelvin"}},
                 {"name": "get_weather", "arguments": {"location": "Paris", "days": 0}},
                 {"name": "get_weather", "arguments": {"location": "Paris", "days": 15}},
                 {"name": "get_weather", "arguments": {"unit": "celsius"}}],
    "order": [{"order_id": "not-a-uuid", "items": [{"sku": "ABC-1", "quantity": 1, "price": 1}]},
              {"order_id": "123e4567-e89b-12d3-a456-426614174000", "items": []},
              {"order_id": "123e4567-e89b-12d3-a456-426614174000",
               "items": [{"sku": "abc-1", "quantity": 1, "price": 1}]},
              {"order_id": "123e4567-e89b-12d3-a456-426614174000",
               "items": [{"sku": "ABC-1", "quantity": 0, "price": 1}]},
              {"order_id": "123e4567-e89b-12d3-a456-426614174000",
               "items": [{"sku": "ABC-1", "quantity": 1, "price": -0.5}]},
              {"order_id": "123e4567-e89b-12d3-a456-426614174000",
               "items": [{"sku": "ABC-1", "quantity": 1, "price": 1}], "status": "lost"}],
    "tree": [{"value": 1.5}, {"children": []}, {"value": 1, "children": [{"value": "2"}]}],
    "oneOf": [{"kind": "circle", "side": 2}, {"kind": "triangle", "r": 1}, {"kind": "square", "side": "2"}],
    "open_keys": [{"_id": 1}, {"1a": 1}, {"a": "x"}, {"": True}, {"_id": "a", "b": None}, {"id": "a"}],
    "area": [{}, {"length": 2}, {"radius": 1, "length": 2, "width": 3}, {"radius": "1"}],
    "labels": [{"service": "web", "cpus": 0.0099}, {"service": "web", "cpus": 64.5},
               {"service": "web", "cpus": 1, "x-replicas": -1}, {"service": "web", "cpus": 1, "x-Up": 1},
               {"service": "web", "cpus": 1, "123": True}, {"service": "web", "cpus": 1, "other": 1},
               {"service": "web", "cpus": 1, "42": "yes"}, {"service": "web", "cpus": 1, "replicas": 1.5},
               {"service": "web", "cpus": 1, "limits": {}}],
}
