#!/usr/bin/env python3
"""The layer check: calls and includes in src/ go only down the layer table.

The table is the one in docs/DESIGN.md under "## Layers": each row has a
rank, and names the files of its layer.  This script
  - maps every file under src/ to its rank (a file the table does not name
    fails the check: a new file must be placed);
  - fails on a file outside its layer's folder: each layer has one folder,
    src/NN-name/, NN its rank in two digits, so that `ls src/` lists the
    layers in the table's order;
  - reads each object file's undefined symbols with nm and fails on any that
    another object of the library defines at a higher rank;
  - fails on any #include of a src/ header of a higher rank (inline
    functions never show in nm);
  - fails on a prototype or extern of an fa__ name written in a .c file:
    declarations live in headers, so that a caller cannot copy one by hand;
  - fails on a loop of calls or data references among the .c files, within
    a layer too (a.c uses b.c and b.c uses a.c): the files of a layer are
    in an order as well, which its header states, and a reader can take
    them one at a time from the bottom;
  - fails on a call of a standard copy function (memcpy, memset, strcpy and
    their kin) written anywhere but 12-api/bounds.c, which exports the
    hardened library's bounded ones, and 00-base/mem.h, the seam the rest
    of the library copies through: in the hardened library those names are
    the bounded copies, and the library's own writes must not be bounded;
  - in a build whose library defines those names itself (the hardened
    one), fails on an object other than bounds.c's that calls them: the
    compiler too turns loops and struct copies into memcpy and memset.

usage: check_layers.py REPO_ROOT OBJECT_DIR [OBJECT_DIR...]
Each OBJECT_DIR is one library's CMake object folder (the static archive,
the shared library, the hardened library); its objects are named after
their sources (src/08-tcache/own.c -> .../src/08-tcache/own.c.o).
"""
import os
import re
import subprocess
import sys


def fail(msg):
    print("check_layers: " + msg)
    return 1


def read_table(design):
    """{path: (rank, layer name)} from the table under '## Layers'."""
    ranks = {}
    in_section = False
    with open(design, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                in_section = line.strip() == "## Layers"
                continue
            if not in_section or not line.startswith("|"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 3 or not cells[0].isdigit():
                continue
            rank, layer = int(cells[0]), cells[1]
            for path in re.findall(r"`(src/[^`]+)`", cells[2]):
                if path in ranks:
                    raise SystemExit(fail("%s is in two rows of the table" % path))
                ranks[path] = (rank, layer)
    return ranks


def source_files(root):
    out = []
    for d, _, files in os.walk(os.path.join(root, "src")):
        for name in files:
            if name.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(d, name), root))
    return sorted(out)


def nm_symbols(objects):
    """{object: (defined set, undefined set)}"""
    out = subprocess.run([os.environ.get("NM", "nm"), "-A"] + objects, check=True, capture_output=True, text=True).stdout
    syms = {o: (set(), set()) for o in objects}
    for line in out.splitlines():
        obj, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[0] == "U":
            syms[obj][1].add(parts[1])
        elif len(parts) == 3 and parts[1] not in ("U", "w", "v"):
            syms[obj][0].add(parts[2])
    return syms


# A function prototype, or an extern, of an fa__ name at file scope.
PROTO = re.compile(r"^(?!static\b)(?:extern\b[^;{(]*\b(fa__\w+)\b[^;{]*"
                   r"|[A-Za-z_][\w \t\*]*\b(fa__\w+)\s*\([^;{]*\)[^;{]*);\s*$")


def loops(syms, definer, src_of):
    """The loops of the graph 'object uses a symbol another object defines',
    each as a list of sources, one per strongly connected component."""
    edges = {}
    for o, (_, undefined) in syms.items():
        edges[o] = sorted({definer[s] for s in undefined if s in definer and definer[s] != o})
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):  # Tarjan's algorithm; the graph is a few dozen objects
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(src_of[c] for c in comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


COPIES = ("memcpy", "memmove", "mempcpy", "memset", "strcpy", "stpcpy",
          "strcat", "strncpy", "strncat")
COPY_CALL = re.compile(r"(?<![\w.>])(%s)\s*\(" % "|".join(COPIES))
COPY_FILES = ("src/12-api/bounds.c", "src/00-base/mem.h")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def check_objects(objdir, root, ranks, errors):
    """The upward calls, loops and copy calls of one library's objects;
    returns the number of objects read."""
    objects = []
    for d, _, names in os.walk(objdir):
        objects += [os.path.join(d, n) for n in names if n.endswith(".c.o")]
    if not objects:
        errors.append("no object files under %s" % objdir)
        return 0
    src_of = {}
    for o in list(objects):
        rel = os.path.relpath(o, objdir)
        i = rel.find("src" + os.sep)
        src_of[o] = rel[i:-2] if i >= 0 else rel
        # An object left in an old build folder by a source since removed.
        if not os.path.exists(os.path.join(root, src_of[o])):
            objects.remove(o)
    syms = nm_symbols(objects)
    definer = {}
    for o, (defined, _) in syms.items():
        for s in defined:
            definer[s] = o
    where = os.path.basename(os.path.normpath(objdir))
    for o, (_, undefined) in syms.items():
        me = src_of[o]
        if me not in ranks:
            errors.append("object %s has no row in the table" % me)
            continue
        for s in sorted(undefined):
            d = definer.get(s)
            if d is None:
                continue
            them = src_of[d]
            if s in COPIES and me not in COPY_FILES:
                errors.append("%s (%s) calls %s, which this library defines (%s): copy through "
                              "00-base/mem.h" % (me, where, s, them))
            if them in ranks and ranks[them][0] > ranks[me][0]:
                errors.append("%s (%s, rank %d) uses %s from %s (%s, rank %d): an upward call [%s]"
                              % (me, ranks[me][1], ranks[me][0], s, them, ranks[them][1], ranks[them][0], where))
    for loop in loops(syms, definer, src_of):
        errors.append("files that use each other in a loop (calls or data): %s [%s]" % (", ".join(loop), where))
    return len(objects)


def main():
    if len(sys.argv) < 3:
        return fail("usage: check_layers.py REPO_ROOT OBJECT_DIR [OBJECT_DIR...]")
    root, objdirs = sys.argv[1], sys.argv[2:]
    ranks = read_table(os.path.join(root, "docs", "DESIGN.md"))
    if not ranks:
        return fail("no layer table under '## Layers' in docs/DESIGN.md")
    errors = []
    files = source_files(root)
    for f in files:
        if f not in ranks:
            errors.append("%s is not in the layer table of docs/DESIGN.md" % f)
    for f in ranks:
        if f not in files:
            errors.append("the layer table names %s, which does not exist" % f)

    # Folders: a layer's files all live in src/NN-name/, NN its rank.
    folder_of = {}
    for f, (rank, layer) in sorted(ranks.items()):
        parts = f.split("/")
        folder = parts[1] if len(parts) == 3 else ""
        if not re.match(r"%02d-[a-z]+$" % rank, folder):
            errors.append("%s is in the wrong folder: layer %d (%s) lives in src/%02d-<name>/"
                          % (f, rank, layer, rank))
        elif folder_of.setdefault(rank, folder) != folder:
            errors.append("%s is in src/%s/, but layer %d (%s) lives in src/%s/"
                          % (f, folder, rank, layer, folder_of[rank]))

    # Includes.
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for f in files:
        if f not in ranks:
            continue
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                m = inc.match(line)
                if not m or m.group(1) == "fastalloc.h":
                    continue
                target = "src/" + m.group(1)
                if target not in ranks:
                    errors.append("%s:%d includes %s, which is not in the table" % (f, n, m.group(1)))
                elif ranks[target][0] > ranks[f][0]:
                    errors.append("%s:%d (%s) includes %s (%s): an upward include"
                                  % (f, n, ranks[f][1], m.group(1), ranks[target][1]))

    # Hand-written declarations in .c files.
    for f in files:
        if not f.endswith(".c"):
            continue
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            depth = 0
            for n, line in enumerate(fh, 1):
                m = PROTO.match(line) if depth == 0 else None
                if m:
                    errors.append("%s:%d declares %s: declare it in its layer's header"
                                  % (f, n, m.group(1) or m.group(2)))
                depth += line.count("{") - line.count("}")

    # The standard copies, named in the source.
    for f in files:
        if f in COPY_FILES:
            continue
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            text = strip_comments(fh.read())
        for n, line in enumerate(text.splitlines(), 1):
            m = COPY_CALL.search(line)
            if m:
                errors.append("%s:%d calls %s: copy through 00-base/mem.h (fa__memcpy, fa__memset)"
                              % (f, n, m.group(1)))

    # Calls and data references, from the objects of each library.
    nobjects = [check_objects(d, root, ranks, errors) for d in objdirs]
    for e in errors:
        print("check_layers: " + e)
    if errors:
        return 1
    print("check_layers: %d files in %d layers, %s objects in %d libraries: every call and include "
          "goes down, and only bounds.c calls the standard copies"
          % (len(files), len({r for r, _ in ranks.values()}), "+".join(map(str, nobjects)), len(objdirs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
