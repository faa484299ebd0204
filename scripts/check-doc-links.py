#!/usr/bin/env python3
"""Checks the relative links of README.md and docs/**/*.md.

Every markdown link `[text](target)` whose target is not a URL must name a
file of the repository, and its `#anchor`, if any, a heading of that file
(GitHub's anchors: lower case, punctuation dropped, spaces as hyphens,
repeats numbered). Links inside code blocks and code spans are not links.
Also fails on paths outside the repository (`../shared`, `/work/`) and on a
page of docs/ (but docs/generated) that the index, docs/README.md, does not
link.
Prints one line per broken link and exits 1 if there is any.

    scripts/check-doc-links.py [REPO_ROOT]
"""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
OUTSIDE = re.compile(r"\.\./shared|shared/design|/work/")


def strip_code(text):
    """The text with fenced blocks, indented blocks and code spans blanked
    (line count kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            out.append("")
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        out.append(re.sub(r"(`+)(?:(?!\1).)+\1", "", line))
    return "\n".join(out)


def anchors(path):
    """GitHub's anchors of a file's headings (a code span keeps its text)."""
    seen, result, fence = {}, set(), None
    for line in open(path, encoding="utf-8").read().split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0]:
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2))
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    files = [os.path.join(root, "README.md")]
    for d, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]
    cache, bad, count = {}, [], 0
    for f in sorted(files):
        rel = os.path.relpath(f, root)
        raw = open(f, encoding="utf-8").read()
        generated = rel.startswith(os.path.join("docs", "generated"))
        for i, line in enumerate(raw.split("\n"), 1):
            if not generated and OUTSIDE.search(line):
                bad.append(f"{rel}:{i}: points outside the repository: {line.strip()}")
        for i, line in enumerate(strip_code(raw).split("\n"), 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                    continue  # http:, https:, mailto:
                count += 1
                path, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                if not os.path.abspath(dest).startswith(root + os.sep):
                    bad.append(f"{rel}:{i}: {target}: outside the repository")
                    continue
                if not os.path.exists(dest):
                    bad.append(f"{rel}:{i}: {target}: no such file")
                    continue
                if frag and dest.endswith(".md"):
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if frag not in cache[dest]:
                        bad.append(f"{rel}:{i}: {target}: no heading #{frag}")
    # The index lists every page.
    index = os.path.join(root, "docs", "README.md")
    if os.path.exists(index):
        linked = {os.path.normpath(os.path.join(os.path.dirname(index), m.group(1).partition("#")[0]))
                  for m in LINK.finditer(strip_code(open(index, encoding="utf-8").read()))}
        for f in sorted(files):
            rel = os.path.relpath(f, root)
            if (f != index and rel.startswith("docs" + os.sep) and
                    not rel.startswith(os.path.join("docs", "generated")) and f not in linked):
                bad.append(f"docs/README.md: does not list {rel}")
    for b in bad:
        print(b)
    print(f"{len(files)} files, {count} relative links, {len(bad)} broken")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
