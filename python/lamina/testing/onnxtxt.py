"""Turns ONNX's textual syntax into a model file, for lit tests.

Import tests are written as `.onnxtxt` files: ONNX text (see
onnx.parser) whose `#` comments carry the lit RUN and CHECK lines, so the
model and what Lamina must make of it sit in one readable file.

    python3 -m lamina.testing.onnxtxt TEST.onnxtxt -o MODEL.onnx [--reverse]
"""
import argparse
import sys

import onnx
import onnx.parser


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("input")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--reverse", action="store_true",
                    help="list the graph's nodes in reverse order")
    args = ap.parse_args(argv)
    with open(args.input) as f:
        text = f.read()
    model = onnx.parser.parse_model(text)
    if args.reverse:
        nodes = list(model.graph.node)[::-1]
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    onnx.save(model, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
