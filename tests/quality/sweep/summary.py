#!/usr/bin/env python3
"""Equal-byte comparisons and rule checks over $SWEEP_DIR/rows.json (run analyze.py first)."""
import json, collections, math, os, sys
rows = json.load(open(os.path.join(os.environ.get('SWEEP_DIR', '/tmp/kvtool-sweep'), 'rows.json')))
HD = {'stories': 8, 'baby': 16, 'cheaders': 64}
def hd(ds): return HD.get(ds, 64)
BUD = ['0.05', '0.1', '0.2']
REAL = lambda ds: not ds.startswith('synth')
dsP = sorted(set((r['ds'], r['P']) for r in rows), key=lambda x: (not REAL(x[0]), x[0], x[1]))

def get(ds, P, art):
    return {r['setting']: r for r in rows if r['ds'] == ds and r['P'] == P and r['art'] == art}

def fmt(x, p=4):
    return '—' if x is None else ('%.' + str(p) + 'f') % x

def line(ds, P, art, tag=''):
    g = get(ds, P, art)
    if not g: return None
    bf = next(iter(g.values()))['raw_frac']
    cells = []
    for b in BUD:
        r = g.get(b)
        if not r: cells.append('—'); continue
        cells.append('%s/%s/%s' % (fmt(r['kl']), fmt(r['top1'], 3), fmt(r['ratio'], 3)))
    return '| %s | %s | %s%s | %s | %s |' % (ds, P, art, tag, fmt(100 * bf, 2) if bf is not None else '—', ' | '.join(cells))

def score(ds, P, art, key):
    g = get(ds, P, art)
    v = [g[b][key] for b in BUD if b in g and g[b][key] is not None]
    return sum(v) / len(v) if len(v) == 3 else None

def wins(ds, P, a, d):
    """a beats d: KL <= (real) and ratio >= at every budget (small tolerance)."""
    ga, gd = get(ds, P, a), get(ds, P, d)
    if not ga or not gd: return None
    if any((r['sel_cmp'] or 0) > 0.9 or (r['sel'] or 0) > 0.9 for r in ga.values()): return 'dense'
    ok = True
    for b in BUD:
        if b not in ga or b not in gd: return None
        # KL over 48-64 teacher-forced steps is noisy: allow 10 % or 2e-4 nats
        if REAL(ds) and ga[b]['kl'] is not None and gd[b]['kl'] is not None and ga[b]['kl'] > gd[b]['kl'] * 1.10 + 2e-4: ok = False
        if ga[b]['ratio'] is not None and gd[b]['ratio'] is not None and ga[b]['ratio'] < gd[b]['ratio'] - 0.002: ok = False
    return ok

def ruleD_mb(d, n):
    best = None
    for b in range(4, 9):
        if 2 ** b >= n: continue
        for m in (2, 4, 8, 16, 32):
            if m > d or d % m: continue
            if 2 ** (b + 1) * d + m * n > 2 ** 8 * d + 2 * n: continue
            key = (m * b, b)
            if best is None or key > best[0]: best = (key, m, b)
    return best and (best[1], best[2])

def ruleD(ds, P):
    mb = ruleD_mb(hd(ds), P - 32)
    if not mb: return None
    m, b = mb
    return ('pq_' if m <= 8 else 'pqx_') + 'm%d_b%d_f16' % (m, b)

HDR = '| model | prefix | setting | idx raw %KV | 5%: KL/top-1/ratio | 10% | 20% |\n|---|---|---|---|---|---|---|'

def arts(ds, P, pre):
    return sorted(set(r['art'] for r in rows if r['ds'] == ds and r['P'] == P and r['art'].startswith(pre)))

def bytes_of(ds, P, a):
    g = get(ds, P, a); return next(iter(g.values()))['raw_frac'] if g else None

def equal_byte_best(pre_list, default, tol=1.005, dense_ok=False):
    print(HDR)
    for ds, P in dsP:
        B0 = bytes_of(ds, P, default)
        if B0 is None: continue
        print(line(ds, P, default, ' (default)'))
        cands = []
        for pre in pre_list:
            for a in arts(ds, P, pre):
                if a == default or a.endswith('_d01'): continue
                b = bytes_of(ds, P, a)
                if b is None or b > B0 * tol: continue
                g = get(ds, P, a)
                if any((r['sel'] or 0) > 0.9 or (r['sel_cmp'] or 0) > 0.9 for r in g.values()): continue  # dense parts
                s = score(ds, P, a, 'ratio')
                if s is not None: cands.append((s, a))
        for s, a in sorted(cands, reverse=True)[:3]:
            w = wins(ds, P, a, default)
            print(line(ds, P, a, ' %s' % ('**beats default at every budget**' if w is True else '(not at every budget)')))

def rule_check(rule, default, title):
    print('\n%s\n' % title); print(HDR)
    allwin = True
    for ds, P in dsP:
        a = rule(ds, P)
        if a is None or not get(ds, P, a) or not get(ds, P, default): continue
        B0, B1 = bytes_of(ds, P, default), bytes_of(ds, P, a)
        w = wins(ds, P, a, default)
        allwin &= (w is True)
        print(line(ds, P, default, ' (default)'))
        print(line(ds, P, a, ' %s, bytes %s default' % ({True: 'WINS', False: 'does NOT win at every budget', 'dense': 'DENSE: 2^b >= indexed rows, selects every row'}[w], '<=' if B1 <= B0 * 1.005 else '>')))
    print('\nrule wins at every (model, prefix): %s' % allwin)

if __name__ == '__main__':
    what = sys.argv[1] if len(sys.argv) > 1 else 'all'
    if what in ('pq', 'all'):
        print('\n### PQ: best settings at <= the default\'s index bytes (default m2 b6 f32)\n')
        equal_byte_best(['pq_', 'pqx_'], 'pq_m2_b6_f32')
        rule_check(lambda ds, P: 'pq_m2_b7_f16', 'pq_m2_b6_f32', '### PQ rule A: -m 2 -b 7 --codebook-dtype f16 (exactly the default\'s bytes at every prefix)')
        def ruleB(ds, P):
            d = hd(ds); n = P - 32
            mmax = 2 + 128 * d / n
            ms = [m for m in (2, 4, 8, 16, 32) if d % m == 0 and m <= d and m <= mmax]
            m = max(ms)
            return ('pq_' if m <= 8 else 'pqx_') + 'm%d_b6_f16' % m
        rule_check(ruleB, 'pq_m2_b6_f32', '### PQ rule B: -b 6 --codebook-dtype f16, m = largest divisor of d <= 2 + 128 d / n (n indexed rows): <= default bytes')
        def ruleC(ds, P):
            d = hd(ds); n = P - 32
            mmax = 2 + 192 * d / n   # b=5 f16 frees 192 d bytes
            ms = [m for m in (2, 4, 8, 16, 32) if d % m == 0 and m <= d and m <= mmax]
            m = max(ms)
            return ('pq_' if m <= 8 else 'pqx_') + 'm%d_b5_f16' % m
        rule_check(ruleC, 'pq_m2_b6_f32', '### PQ rule C: -b 5 --codebook-dtype f16, m = largest divisor of d <= 2 + 192 d / n')
        rule_check(ruleD, 'pq_m2_b6_f32', '### PQ rule D (recommended): f16 codebooks; (m, b) = argmax m*b (tie: larger b) over m | d, m <= 32, 4 <= b <= 8, 2^b < n, subject to 2^(b+1) d + m n <= 2^8 d + 2 n (the default\'s bytes per part)')
    if what in ('ckv', 'all'):
        print('\n### ClusterKV: best settings at <= the default\'s index bytes (default t80 f32, no dense layers)\n')
        equal_byte_best(['ckv_', 'ckvc_'], 'ckv_t80_f32', tol=1.05)
        # cluster count vs quality
        print('\n### ClusterKV: retained-mass ratio at budget 0.1 against cluster count C (f16, no dense layers)\n')
        cols = [(ds, P) for ds, P in dsP]
        print('| C or t | ' + ' | '.join('%s p%d' % c for c in cols) + ' |')
        print('|---|' + '---|' * len(cols))
        for C in (8, 16, 32, 64, 128, 256):
            cells = []
            for ds, P in cols:
                g = get(ds, P, 'ckvc_C%d_f16' % C)
                cells.append(fmt(g['0.1']['ratio'], 3) if '0.1' in g and g['0.1']['ratio'] is not None else '—')
            print('| C=%d | ' % C + ' | '.join(cells) + ' |')
        for t in (80, 40, 20, 10, 8, 5, 4):
            cells = []
            for ds, P in cols:
                g = get(ds, P, 'ckv_t%d_f16' % t)
                cells.append(fmt(g['0.1']['ratio'], 3) if '0.1' in g and g['0.1']['ratio'] is not None else '—')
            print('| t=%d | ' % t + ' | '.join(cells) + ' |')
        print('\n### ClusterKV: KL at budget 0.1 against C (real models)\n')
        cols = [(ds, P) for ds, P in dsP if REAL(ds)]
        print('| C or t | ' + ' | '.join('%s p%d' % c for c in cols) + ' |')
        print('|---|' + '---|' * len(cols))
        for C in (8, 16, 32, 64, 128, 256):
            cells = []
            for ds, P in cols:
                g = get(ds, P, 'ckvc_C%d_f16' % C)
                cells.append(fmt(g['0.1']['kl'], 4) if '0.1' in g and g['0.1']['kl'] is not None else '—')
            print('| C=%d | ' % C + ' | '.join(cells) + ' |')
        for t in (80, 40, 20, 10, 8, 5, 4):
            cells = []
            for ds, P in cols:
                g = get(ds, P, 'ckv_t%d_f16' % t)
                cells.append(fmt(g['0.1']['kl'], 4) if '0.1' in g and g['0.1']['kl'] is not None else '—')
            print('| t=%d | ' % t + ' | '.join(cells) + ' |')

def dense_layers():
    print('\n### ClusterKV dense layers 0-1 against no dense layers at about the same selected fraction\n')
    print('Dense layers store nothing (smaller index) but select every row of layers 0-1, so their budget-5/10/20 % points select 0.45-0.62 of the prefix. They are set against the no-dense build of the same t at the higher budget (0.3-0.6) whose selected fraction is nearest, and against the window and exact top-k at the dense build\'s own row count.\n')
    print('| model | prefix | t (f16) | d01 budget | d01 selected | d01 KL | window KL (same rows) | topk KL | no-dense budget | no-dense selected | no-dense KL |')
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    for ds, P in dsP:
        if not REAL(ds): continue
        for t in (80, 20, 10, 5, 4):
            gd = get(ds, P, 'ckv_t%d_f16_d01' % t); gn = get(ds, P, 'ckv_t%d_f16' % t) if t != 80 else get(ds, P, 'ckv_t80_f32')
            gb = get(ds, P, 'ckv_t80_f32_d01')
            if not gd: continue
            for b in BUD:
                r = gd.get(b)
                if not r or r['sel'] is None: continue
                hi = [x for k, x in gn.items() if k in ('0.3', '0.4', '0.5', '0.6') and x['sel'] is not None]
                best = min(hi, key=lambda x: abs(x['sel'] - r['sel'])) if hi else None
                w = gb.get(b, {})
                print('| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |' % (ds, P, t, b, fmt(r['sel'], 3), fmt(r['kl']),
                      fmt(w.get('w_kl')), fmt(w.get('t_kl')), best['setting'] if best else '—', fmt(best['sel'], 3) if best else '—', fmt(best['kl']) if best else '—'))

def fit_ckv():
    """least squares: ratio@budget ~ a + b ln C + c ln n over every no-dense f16 clusterkv point (synthetic and real)."""
    import itertools
    print('\n### ClusterKV: fit of retained-mass ratio on ln(clusters) and ln(indexed rows)\n')
    print('| budget | points | a | b (per ln C) | c (per ln n) | alpha = -c/b (C ~ n^alpha keeps the ratio) | rms residual |')
    print('|---|---|---|---|---|---|---|')
    for bud in BUD:
        X = []; Y = []
        for r in rows:
            if r['kind'] != 'ckv' or r['setting'] != bud or r['ratio'] is None or r['art'].endswith('_d01') or 'f32' in r['art']: continue
            n = r['P'] - 16
            if r['art'].startswith('ckvc_C'):
                C = min(int(r['art'].split('_')[1][1:]), n)
            else:
                t = int(r['art'].split('_')[1][1:]); C = max(1, round(n / t))
            X.append((1.0, math.log(C), math.log(n))); Y.append(r['ratio'])
        if len(X) < 5: continue
        # normal equations 3x3
        A = [[sum(x[i] * x[j] for x in X) for j in range(3)] for i in range(3)]
        v = [sum(x[i] * y for x, y in zip(X, Y)) for i in range(3)]
        # gaussian elimination
        M = [A[i] + [v[i]] for i in range(3)]
        for i in range(3):
            p = max(range(i, 3), key=lambda k: abs(M[k][i])); M[i], M[p] = M[p], M[i]
            for k in range(3):
                if k != i:
                    fct = M[k][i] / M[i][i]
                    M[k] = [a - fct * b for a, b in zip(M[k], M[i])]
        coef = [M[i][3] / M[i][i] for i in range(3)]
        res = [y - sum(c * xi for c, xi in zip(coef, x)) for x, y in zip(X, Y)]
        rms = math.sqrt(sum(e * e for e in res) / len(res))
        print('| %s | %d | %.3f | %.3f | %.3f | %.2f | %.3f |' % (bud, len(X), coef[0], coef[1], coef[2], -coef[2] / coef[1], rms))

if __name__ == '__main__':
    what = sys.argv[1] if len(sys.argv) > 1 else 'all'
    if what in ('ckv', 'all', 'dense'):
        dense_layers()
    if what in ('ckv', 'all', 'fit'):
        fit_ckv()

def ckv_rule():
    print('\n### ClusterKV rule: clusters C = 5 sqrt(n) (n indexed rows), f16 centroids, no dense layers; nearest measured build (log distance)\n')
    print('| model | prefix | n | rule C | build used (its C) | idx raw %KV (default) | 5%: KL/top-1/ratio | 10% | 20% | window KL 5/10/20 % |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    for ds, P in dsP:
        n = P - 16
        Crule = 5 * n ** 0.5
        cands = []
        for a in arts(ds, P, 'ckv'):
            if a.endswith('_d01') or 'f32' in a: continue
            if a.startswith('ckvc_C'): C = min(int(a.split('_')[1][1:]), n)
            else: C = max(1, round(n / int(a.split('_')[1][1:])))
            cands.append((abs(math.log(C / Crule)), a, C))
        if not cands: continue
        _, a, C = min(cands)
        g = get(ds, P, a); gd = get(ds, P, 'ckv_t80_f32')
        cells = []
        for b in BUD:
            r = g.get(b); cells.append('%s/%s/%s' % (fmt(r['kl']), fmt(r['top1'], 3), fmt(r['ratio'], 3)) if r else '—')
        dcells = ['%s/%s/%s' % (fmt(gd[b]['kl']), fmt(gd[b]['top1'], 3), fmt(gd[b]['ratio'], 3)) if b in gd else '—' for b in BUD]
        wk = '/'.join(fmt(gd[b]['w_kl']) if b in gd else '—' for b in BUD)
        print('| %s | %d | %d | %.0f | %s (%d) | %s (%s) | %s | %s | %s | %s |' % (ds, P, n, Crule, a, C, fmt(100 * bytes_of(ds, P, a), 2), fmt(100 * bytes_of(ds, P, 'ckv_t80_f32'), 2), *cells, wk))
        print('| | | | | default ckv_t80_f32 | | %s | %s | %s | |' % tuple(dcells))

def fit_ckv_fe():
    print('\n### ClusterKV: fit with one intercept per model (prefix effect estimated within each model)\n')
    print('| budget | points | b (per ln C) | c (per ln n) | alpha = -c/b |')
    print('|---|---|---|---|---|')
    for bud in BUD:
        pts = collections.defaultdict(list)
        for r in rows:
            if r['kind'] != 'ckv' or r['setting'] != bud or r['ratio'] is None or r['art'].endswith('_d01') or 'f32' in r['art']: continue
            n = r['P'] - 16
            if r['art'].startswith('ckvc_C'): C = min(int(r['art'].split('_')[1][1:]), n)
            else: C = max(1, round(n / int(r['art'].split('_')[1][1:])))
            if C >= n: continue
            model = 'synth' if r['ds'].startswith('synth') else r['ds']
            pts[model].append((math.log(C), math.log(n), r['ratio']))
        # demean within model, then 2-variable least squares
        X = []; Y = []
        for m, ps in pts.items():
            if len(set(p[1] for p in ps)) < 2: continue
            mx = sum(p[0] for p in ps) / len(ps); mn = sum(p[1] for p in ps) / len(ps); my = sum(p[2] for p in ps) / len(ps)
            for p in ps: X.append((p[0] - mx, p[1] - mn)); Y.append(p[2] - my)
        if len(X) < 5: continue
        s11 = sum(x[0] * x[0] for x in X); s12 = sum(x[0] * x[1] for x in X); s22 = sum(x[1] * x[1] for x in X)
        t1 = sum(x[0] * y for x, y in zip(X, Y)); t2 = sum(x[1] * y for x, y in zip(X, Y))
        det = s11 * s22 - s12 * s12
        b = (t1 * s22 - t2 * s12) / det; c = (s11 * t2 - s12 * t1) / det
        print('| %s | %d | %.3f | %.3f | %.2f |' % (bud, len(X), b, c, -c / b))

if __name__ == '__main__':
    what = sys.argv[1] if len(sys.argv) > 1 else 'all'
    if what in ('ckv', 'all', 'fit'):
        fit_ckv_fe()
    if what in ('ckv', 'all', 'rule'):
        ckv_rule()

def lsh_table():
    print('\n### LSH: (K, L) settings at the same collision threshold c — selected fraction / KL / retained-mass ratio; window KL at the same rows\n')
    sets = ['lsh_K10_L150', 'lsh_K8_L50', 'lsh_K8_L100', 'lsh_K6_L150', 'lsh_K10_L75', 'lsh_K12_L50']
    print('| model | prefix | c | ' + ' | '.join('%s (%%KV)' % s[4:] for s in sets) + ' |')
    print('|---|---|---|' + '---|' * len(sets))
    for ds, P in dsP:
        for c in ('c=1', 'c=2', 'c=4'):
            cells = []
            for s in sets:
                g = get(ds, P, s); r = g.get(c)
                if not r: cells.append('—'); continue
                sel = r['sel'] if r['sel'] is not None else r['sel_cmp']
                cells.append('%s / %s / %s; W %s [%s]' % (fmt(sel, 3), fmt(r['kl']), fmt(r['ratio'], 3), fmt(r['w_kl']), fmt(100 * r['raw_frac'], 0)))
            print('| %s | %d | %s | ' % (ds, P, c) + ' | '.join(cells) + ' |')

def sq_table():
    print('\n### Squeeze: percent-clusters x coarse-percent, quantile 0.5 and 0.9 (hierarchical) — selected / KL / ratio; window KL at the same rows [raw %KV]\n')
    sets = ['sq_pc2_cp25', 'sq_pc5_cp25', 'sq_pc5_cp50', 'sq_pc10_cp25', 'sq_pc20_cp25']
    print('| model | prefix | q | ' + ' | '.join(s[3:] for s in sets) + ' |')
    print('|---|---|---|' + '---|' * len(sets))
    for ds, P in dsP:
        for q in ('q=0.5/hier', 'q=0.9/hier'):
            cells = []
            for s in sets:
                g = get(ds, P, s); r = g.get(q)
                if not r: cells.append('—'); continue
                sel = r['sel'] if r['sel'] is not None else r['sel_cmp']
                cells.append('%s / %s / %s; W %s [%s]' % (fmt(sel, 3), fmt(r['kl']), fmt(r['ratio'], 3), fmt(r['w_kl']), fmt(100 * r['raw_frac'], 1)))
            print('| %s | %d | %s | ' % (ds, P, q[:5]) + ' | '.join(cells) + ' |')

if __name__ == '__main__':
    what = sys.argv[1] if len(sys.argv) > 1 else 'all'
    if what in ('lsh', 'all'):
        lsh_table()
    if what in ('sq', 'all'):
        sq_table()

def seeds():
    import os
    p = os.path.join(os.environ.get('SWEEP_DIR', '/tmp/kvtool-sweep'), 'raw', 'baby.p192.seeds_pq.json')
    if not os.path.exists(p): return
    d = json.load(open(p)); t = collections.defaultdict(list)
    for r in d['results']:
        a = r['artifact'].split('/')[-1].rsplit('_s', 1)[0]; t[(a, str(float(r['setting'])))].append(r['mean_kl'])
    print('\n### Seed noise: babyllama361 prefix 192, KL mean per build seed 1-4\n')
    print('| build | budget | KL per seed | mean |'); print('|---|---|---|---|')
    for (a, b), v in sorted(t.items()):
        print('| %s | %s | %s | %.4f |' % ({'baby_def': 'm2 b6 f32 (default)', 'baby_m16b5': 'm16 b5 f16 (rule)', 'baby_m2b7': 'm2 b7 f16'}.get(a, a), b, ' / '.join('%.4f' % x for x in v), sum(v) / len(v)))

if __name__ == '__main__':
    what = sys.argv[1] if len(sys.argv) > 1 else 'all'
    if what in ('all', 'seeds'):
        seeds()
