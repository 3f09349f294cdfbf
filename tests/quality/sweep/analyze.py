#!/usr/bin/env python3
"""Join $SWEEP_DIR/raw/*.json into tables (markdown on stdout) and $SWEEP_DIR/rows.json."""
import json, os, glob, re, sys, collections
R = os.path.join(os.environ.get('SWEEP_DIR', '/tmp/kvtool-sweep'), 'raw')

def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception:
        return None

def art(a):
    return os.path.basename(a)[:-4]

def cmp_rows(path):
    """-> {(artifact, setting): dict} with retained-mass ratio, selected fraction, bytes."""
    d = load(path); out = {}
    if not d: return out
    for a in d['artifacts']:
        e = a['eval']; ib = e['index_bytes']; name = art(e['artifact'])
        for r in e['budgets']:
            s = r['selector']
            if s['kind'] in ('pq', 'clusterkv'):
                key = s['budget']
                key = str(float(key)) if key else key
            elif s['kind'] == 'lsh':
                key = 'c=%d' % s['min_collisions']
            else:
                key = 'q=%s/%s' % (s['quantile'], 'hier' if s['mode'] == 'hierarchical' else 'flat')
            out[(name, key)] = dict(ratio=r['quality_ratio'], retained=r['retained_mass_mean'],
                                    oracle=r['oracle_retained_mass_mean'], sel_cmp=r['selected_fraction_mean'],
                                    raw_frac=ib['raw_fraction'], stored_frac=ib['stored_fraction'],
                                    kv_bytes=ib['kv_bytes'], raw=ib['raw'], stored=ib['stored'],
                                    recall=r.get('recall_support_mean'))
    return out

def ed_rows(path):
    d = load(path); out = []
    if not d: return out
    for r in (d.get('results', []) if isinstance(d, dict) else []):
        out.append(r)
    return out

def normset(kind, s):
    if kind in ('pq', 'clusterkv', 'window', 'topk'):
        try: return str(float(s))
        except Exception: return s
    return s

KMAP = {'pq': 'pq', 'pqx': 'pq', 'ckv': 'ckv', 'ckvc': 'ckv', 'lsh': 'lsh', 'sq': 'sq'}
EDF = {'pq': ['ed_pq', 'ed_base'], 'pqx': ['ed_pqx'], 'ckv': ['ed_ckv', 'ed_base', 'ed_ckv_hi'],
       'ckvc': ['ed_ckvc'], 'lsh': ['ed_lsh'], 'sq': ['ed_sq']}

def collect():
    rows = []
    for cmpf in sorted(glob.glob(R + '/*.cmp_*.json')):
        base = os.path.basename(cmpf)
        m = re.match(r'(.+)\.p(\d+)\.cmp_(\w+)\.json', base)
        ds, P, sub = m.group(1), int(m.group(2)), m.group(3)
        kind = KMAP[sub]
        C = cmp_rows(cmpf)
        ED = {}; BASE = {}
        for ef in EDF[sub]:
            for r in ed_rows('%s/%s.p%d.%s.json' % (R, ds, P, ef)):
                a = art(r['artifact']); s = normset(r['kind'], r['setting'])
                if r['kind'] in ('window', 'topk'):
                    BASE[(a, s, r['kind'])] = r
                else:
                    ED[(a, s)] = r
        keys = set(C) | set(k for k in ED if k[0].startswith(sub + '_'))
        for (a, s) in sorted(keys):
            if not a.startswith(sub + '_'): continue
            c = C.get((a, s), {}); e = ED.get((a, s), {})
            if not c and not e: continue
            if not c:
                for (a2, s2), v in C.items():
                    if a2 == a: c = dict(raw_frac=v['raw_frac'], stored_frac=v['stored_frac']); break
            w = BASE.get((a, s, 'window'), {}); t = BASE.get((a, s, 'topk'), {})
            rows.append(dict(ds=ds, P=P, kind=kind, art=a, setting=s,
                             raw_frac=c.get('raw_frac'), stored_frac=c.get('stored_frac'),
                             ratio=c.get('ratio'), sel_cmp=c.get('sel_cmp'),
                             sel=e.get('selected_fraction'), union=e.get('selected_fraction_kv_union'),
                             kl=e.get('mean_kl'), maxkl=e.get('max_kl'), top1=e.get('top1_agreement'),
                             div=e.get('diverge_step'),
                             w_kl=w.get('mean_kl'), w_top1=w.get('top1_agreement'),
                             t_kl=t.get('mean_kl'), t_top1=t.get('top1_agreement')))
    return rows

def f(x, p=4):
    if x is None: return '—'
    if isinstance(x, float): return ('%.' + str(p) + 'f') % x
    return str(x)

NAMES = {'stories': 'stories260K (d=8, 2 q heads per KV head)', 'baby': 'babyllama361 (d=16)', 'cheaders': 'cheaders (d=64, 4 q heads per KV head)'}

def cell(r):
    if r is None: return '—'
    sel = r['sel'] if r['sel'] is not None else r['sel_cmp']
    return '%s / %s / %s / %s' % (f(sel, 3), f(r['kl']), f(r['top1'], 3), f(r['ratio'], 3))

def main():
    rows = collect()
    json.dump(rows, open(os.path.join(os.environ.get('SWEEP_DIR', '/tmp/kvtool-sweep'), 'rows.json'), 'w'), indent=0)
    by = collections.defaultdict(list)
    for r in rows: by[(r['ds'], r['P'], r['kind'])].append(r)
    order = {'pq': 0, 'ckv': 1, 'lsh': 2, 'sq': 3}
    title = {'pq': 'PQ', 'ckv': 'ClusterKV', 'lsh': 'LSH (MagicPIG)', 'sq': 'Squeeze'}
    last = None
    for (ds, P, kind) in sorted(by, key=lambda k: (k[0].startswith('synth'), k[0], k[1], order[k[2]])):
        if (ds, P) != last:
            print('\n### %s, prefix %d\n' % (NAMES.get(ds, ds + ' (synthetic, 2 layers, 2 KV heads, 4 q heads, d=64, f16; retained mass only)'), P))
            last = (ds, P)
        rs = by[(ds, P, kind)]
        print('\n#### %s\n' % title[kind])
        if kind in ('pq', 'ckv'):
            print('Cells: selected fraction / KL mean / top-1 / retained-mass ratio (— : not measured; synthetic dumps have no model to decode).\n')
            print('| setting | idx raw %KV | idx stored %KV | budget 5 % | budget 10 % | budget 20 % |')
            print('|---|---|---|---|---|---|')
            arts = collections.defaultdict(dict)
            for r in rs: arts[r['art']][r['setting']] = r
            base = {}
            for a, g in sorted(arts.items(), key=lambda kv: (kv[0].endswith('_d01'), next(iter(kv[1].values()))['raw_frac'] or 0, kv[0])):
                any_r = next(iter(g.values()))
                print('| %s | %s | %s | %s | %s | %s |' % (a, f(100 * any_r['raw_frac'], 2) if any_r['raw_frac'] is not None else '—',
                      f(100 * any_r['stored_frac'], 2) if any_r['stored_frac'] is not None else '—',
                      cell(g.get('0.05')), cell(g.get('0.1')), cell(g.get('0.2'))))
                for b in ('0.05', '0.1', '0.2'):
                    r = g.get(b)
                    if r and r['w_kl'] is not None: base.setdefault(a, {})[b] = r
            for a, g in base.items():
                for k, nm in (('w', 'window'), ('t', 'topk')):
                    cells = []
                    for b in ('0.05', '0.1', '0.2'):
                        r = g.get(b)
                        cells.append('%s / %s / %s / —' % (f(r['sel'], 3), f(r[k + '_kl']), f(r[k + '_top1'], 3)) if r else '—')
                    print('| ↳ %s (rows of %s) | — | — | %s |' % (nm, a, ' | '.join(cells)))
            hi = [r for r in rs if r['setting'] in ('0.3', '0.4', '0.5', '0.6')]
            if hi:
                print('\nNo dense layers, higher budgets (the row counts dense layers 0-1 reach): setting, budget: selected / KL / top-1; window KL; topk KL\n')
                print('| setting | budget | selected | KL | top-1 | window KL / top-1 | topk KL / top-1 |')
                print('|---|---|---|---|---|---|---|')
                for r in sorted(hi, key=lambda r: (r['art'], r['setting'])):
                    print('| %s | %s | %s | %s | %s | %s / %s | %s / %s |' % (r['art'], r['setting'], f(r['sel'], 3), f(r['kl']), f(r['top1'], 3),
                          f(r['w_kl']), f(r['w_top1'], 3), f(r['t_kl']), f(r['t_top1'], 3)))
        else:
            print('| setting | knob | idx raw %KV | idx stored %KV | selected | KV-union | KL mean | top-1 | ratio | window KL / top-1 | topk KL / top-1 |')
            print('|---|---|---|---|---|---|---|---|---|---|---|')
            for r in sorted(rs, key=lambda r: (r['raw_frac'] or 0, r['art'], r['setting'])):
                if r['setting'].endswith('/flat'): continue
                print('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
                    r['art'], r['setting'], f(100 * r['raw_frac'], 2) if r['raw_frac'] is not None else '—',
                    f(100 * r['stored_frac'], 2) if r['stored_frac'] is not None else '—',
                    f(r['sel'] if r['sel'] is not None else r['sel_cmp'], 3), f(r['union'], 3), f(r['kl']), f(r['top1'], 3), f(r['ratio'], 3),
                    (f(r['w_kl']) + ' / ' + f(r['w_top1'], 3)) if r['w_kl'] is not None else '',
                    (f(r['t_kl']) + ' / ' + f(r['t_top1'], 3)) if r['t_kl'] is not None else ''))

if __name__ == '__main__':
    main()
