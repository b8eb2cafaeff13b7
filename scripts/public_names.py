#!/usr/bin/env python3
"""Counts the public names of include/ckpt/*.hpp: names declared at namespace scope in ckpt or
ckpt::mpi (not in a `detail` namespace): functions (overloads counted once), types, aliases,
constants. Usage: scripts/public_names.py REPO [--list] [--check GUIDE]: --check compares the names
with GUIDE's table "Every public name ..." (docs/guide.md's API map) and its count, exits 1 on a
difference (the test `api_map`)."""
import re, sys, pathlib

def strip_template(decl):
    while decl.startswith('template'):
        j = decl.find('<')
        if j < 0: return decl
        depth = 0
        for k in range(j, len(decl)):
            if decl[k] == '<': depth += 1
            elif decl[k] == '>':
                depth -= 1
                if depth == 0:
                    decl = decl[k + 1:].strip()
                    break
        else:
            return decl
        if decl.startswith('requires'):
            rest = decl[len('requires'):].lstrip()
            if rest.startswith('('):  # requires(...): a balanced clause
                depth = 0
                for k, ch in enumerate(rest):
                    depth += ch == '('
                    depth -= ch == ')'
                    if depth == 0:
                        decl = rest[k + 1:].strip()
                        break
            else:
                decl = re.sub(r'^[^\s]+\s*', '', rest)
    return decl

def classify(decl):
    decl = strip_template(' '.join(decl.split()))
    decl = re.sub(r'\[\[[^\]]*\]\]\s*', '', decl)
    if not decl or re.match(r'(namespace|friend|static_assert|extern|using namespace)\b', decl): return None
    m = re.match(r'(?:struct|class|enum\s+class|enum|union)\s+(\w+)\s*(<?)', decl)
    if m: return None if m.group(2) else ('type', m.group(1))  # a specialization names no new type
    m = re.match(r'using\s+(\w+)\s*=', decl)
    if m: return 'alias', m.group(1)
    m = re.match(r'using\s+([\w:]+)::(\w+)$', decl)
    if m: return 'alias', m.group(2)
    paren, eq = decl.find('('), decl.find('=')
    if eq >= 0 and (paren < 0 or eq < paren):
        m = re.search(r'(\w+)\s*$', decl[:eq])
        return ('constant', m.group(1)) if m else None
    if paren >= 0:
        m = re.search(r'(operator\s*[^\s(]+|\w+)\s*$', decl[:paren])
        return ('function', m.group(1)) if m else None
    m = re.search(r'(\w+)\s*$', decl)
    return ('constant', m.group(1)) if m else None

def names_of(repo):
    out = {}
    for path in sorted((repo / 'include/ckpt').glob('*.hpp')):
        text = path.read_text()
        text = re.sub(r'//[^\n]*', '', text)
        text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
        text = re.sub(r'^[ \t]*#[^\n]*', '', text, flags=re.M)
        text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
        text = re.sub(r"'(\\.|[^'\\\n])'", "''", text)
        text = re.sub(r'\{\s*\}', '', text)  # empty braces: default arguments, empty bodies
        scopes = []  # each: list of namespace names it opened, or None for another brace
        stmt = ''
        def public_ns():
            nss = []
            for s in scopes:
                if s is None: return None
                nss += s
            if not nss or nss[0] != 'ckpt' or 'detail' in nss or '' in nss: return None
            return '::'.join(nss)
        for c in text:
            if c == '{':
                s = ' '.join(stmt.split())
                m = re.match(r'^(?:inline\s+)?namespace\s*([\w:]*)$', s)
                if m:
                    scopes.append(m.group(1).split('::') if m.group(1) else [''])
                else:
                    ns = public_ns()
                    if ns is not None and s:
                        r = classify(s)
                        if r and r[1] != 'requires': out.setdefault((ns, r[1]), (r[0], path.name))
                    scopes.append(None)
                stmt = ''
            elif c == '}':
                if scopes: scopes.pop()
                stmt = ''
            elif c == ';':
                ns = public_ns()
                s = ' '.join(stmt.split())
                if ns is not None and s:
                    r = classify(s)
                    if r and r[1] != 'requires': out.setdefault((ns, r[1]), (r[0], path.name))
                stmt = ''
            else:
                stmt += c
    return out

def check(names, guide):
    """The differences between the headers' names and the guide's table of every public name."""
    text = guide.read_text()
    start = text.find('Every public name')
    if start < 0: return ['the guide has no paragraph "Every public name"']
    problems = []
    m = re.search(r'(\d+) in all', text[start:start + 400])
    if not m or int(m.group(1)) != len(names):
        problems.append(f'the guide says {m.group(1) if m else "no count"} in all; the headers have {len(names)}')
    listed = set()
    for line in text[start:].splitlines()[1:]:
        row = re.match(r'\|\s*([\w.]+\.hpp)\s*\|(.*)\|\s*$', line)
        if row:
            for name in re.findall(r'`([^`]+)`', row.group(2)):
                ns = 'ckpt::mpi' if name.startswith('mpi::') else 'ckpt'
                listed.add((row.group(1), ns, name.removeprefix('mpi::')))
        elif listed and not line.startswith('|'):
            break
    actual = {(file, ns, name) for (ns, name), (kind, file) in names.items()}
    problems += [f'not in the guide: {f} {ns}::{n}' for f, ns, n in sorted(actual - listed)]
    problems += [f'in the guide, not in the headers: {f} {ns}::{n}' for f, ns, n in sorted(listed - actual)]
    return problems

names = names_of(pathlib.Path(sys.argv[1]))
if '--check' in sys.argv:
    problems = check(names, pathlib.Path(sys.argv[sys.argv.index('--check') + 1]))
    for p in problems: print(p)
    sys.exit(1 if problems else 0)
if '--list' in sys.argv:
    for (ns, name), (kind, file) in sorted(names.items(), key=lambda x: (x[1][1], x[0])):
        print(f'{file:16} {kind:9} {ns}::{name}')
print(len(names), 'public names')
