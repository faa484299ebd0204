"""Partitions chains of L = 1..13 layers (plus embedding and head) over
p = 1..8 pipeline ranks with every placement and checks that each layer is
placed exactly once, where the placement says it goes.

Usage: partition_sweep.py LAMINA_OPT
"""
import re
import subprocess
import sys


def chain_ir(layers):
    mods = ['#dist.module<"embedding", embedding>']
    mods += [f'#dist.module<"layer.{l}", layer, body = 0>' for l in range(layers)]
    mods += ['#dist.module<"head", head>']
    ops = ['  %v0 = graph.neg %x {dist.module = 0 : i64} : tensor<4xf32>']
    for m in range(1, layers + 2):
        ops.append(f'  %v{m} = graph.tanh %v{m - 1} {{dist.module = {m} : i64}} : tensor<4xf32>')
    return ('func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> attributes '
            '{dist.chain = [' + ', '.join(mods) + ']} {\n' + '\n'.join(ops) +
            f'\n  return %v{layers + 1} : tensor<4xf32>\n}}\n')


def check(kind, layers, p, ranks):
    if len(ranks) != layers + 2:
        return f'{len(ranks)} ranks for {layers + 2} modules'
    if any(r < 0 or r >= p for r in ranks):
        return 'rank out of range'
    lay = ranks[1:-1]
    if kind == 'modular':
        if lay != [l % p for l in range(layers)]:
            return 'layer l not on rank l mod p'
        return None
    if ranks != sorted(ranks):
        return 'not contiguous'
    if kind == 'contiguous':
        counts = [lay.count(r) for r in range(p)]
        if layers >= p and max(counts) - min(counts) > 1:
            return f'unbalanced counts {counts}'
        if layers < p and counts != [1] * layers + [0] * (p - layers):
            return f'counts {counts} for {layers} layers on {p} ranks'
    return None


def main():
    opt = sys.argv[1]
    layer_counts = range(1, 14)
    # One process per (p, placement): the chains are split-input-file chunks.
    irs = '\n// -----\n'.join(chain_ir(layers) for layers in layer_counts)
    checked = failures = 0
    for p in range(1, 9):
        for kind in ('contiguous', 'modular', 'balanced'):
            out = subprocess.run(
                [opt, '-split-input-file', f'--dist-partition=pp={p} placement={kind}'],
                input=irs, capture_output=True, text=True)
            found = re.findall(r'ranks = \[([0-9, ]*)\]', out.stdout)
            if out.returncode or len(found) != len(layer_counts):
                failures += 1
                print(f'p={p} {kind}: {out.stderr.strip() or "missing placements"}')
                continue
            for layers, ranks in zip(layer_counts, found):
                err = check(kind, layers, p, [int(r) for r in ranks.split(',')])
                checked += 1
                if err:
                    failures += 1
                    print(f'L={layers} p={p} {kind}: {err}')
    print(f'checked {checked} placements, failures: {failures}')


main()
