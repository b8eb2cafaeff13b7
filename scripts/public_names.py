#!/usr/bin/env python3
"""Counts the public names of include/ckpt/*.hpp: names declared at namespace scope in ckpt or
ckpt::mpi (not in a `detail` namespace): functions (overloads counted once), types, aliases,
constants. Usage: scripts/public_names.py REPO [--list] (the count of docs/guide.md's API map)."""
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
        decl = re.sub(r'^requires\s+[^\s]+\s*', '', decl) if decl.startswith('requires') else decl
    return decl

def classify(decl):
    decl = strip_template(' '.join(decl.split()))
    decl = re.sub(r'\[\[[^\]]*\]\]\s*', '', decl)
    if not decl or re.match(r'(namespace|friend|static_assert|extern|using namespace)\b', decl): return None
    m = re.match(r'(?:struct|class|enum\s+class|enum|union)\s+(\w+)', decl)
    if m: return 'type', m.group(1)
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

names = names_of(pathlib.Path(sys.argv[1]))
if '--list' in sys.argv:
    for (ns, name), (kind, file) in sorted(names.items(), key=lambda x: (x[1][1], x[0])):
        print(f'{file:16} {kind:9} {ns}::{name}')
print(len(names), 'public names')
