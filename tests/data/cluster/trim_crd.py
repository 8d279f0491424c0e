"""Write a CRD's openAPIV3Schema as the JSON Schema file the cluster-export tests validate against.

    python tests/data/cluster/trim_crd.py CRD.yaml VERSION OUT.json [--keep-spec NAME ...] [--drop PATH ...]

Takes the schema of the CRD's version VERSION as published, then only removes: every ``description``
(prose, no constraint), the ``status`` subtree (the cluster writes it, never a manifest), the spec fields
not named by ``--keep-spec`` (when given), and each ``--drop`` path (dotted through ``properties``).
Nothing is added or loosened, so a document valid here is valid against the whole CRD.
"""

import argparse
import json
from pathlib import Path
from typing import Any

import yaml


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("crd", type=Path)
    parser.add_argument("version")
    parser.add_argument("out", type=Path)
    parser.add_argument("--keep-spec", nargs="*", default=[])
    parser.add_argument("--drop", nargs="*", default=[])
    args = parser.parse_args()
    crd = yaml.safe_load(args.crd.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == args.version]
    schema = without_descriptions(version["schema"]["openAPIV3Schema"])
    schema["properties"].pop("status", None)
    spec = schema["properties"]["spec"]["properties"]
    for name in [n for n in spec if args.keep_spec and n not in args.keep_spec]:
        del spec[name]
    for path in args.drop:
        *parents, leaf = path.split(".")
        node = schema
        for part in parents:
            node = node["properties"][part]
        del node["properties"][leaf]
    args.out.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
