#!/usr/bin/env bash
set -u
: "${OUT:?}"
mkdir -p /tmp/site
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl-nvmath/*.whl > /dev/null 2>&1; echo "pip $?"
export PYTHONPATH="/tmp/site:$(ls -d packages/*/src | tr '\n' ':')" KERN_CACHE=/tmp/kern-cache PYTHONUNBUFFERED=1
for v in P E U; do
  KERN_KERNELS_CUBINS=.levers/c2/$v timeout 100 python3 packages/kern-gen/kernels/bench.py --only gemv > $OUT/gemv-$v.txt 2>&1; echo "gemv $v $?"
done
timeout 240 python3 -m kern_run.cli bench --case qwen3 --qwen3 examples/qwen3-4b --no-baseline --lever qwen3:E=.levers/qwen3-E --lever qwen3:U=.levers/qwen3-U --json $OUT/bench.json > $OUT/bench.txt 2> $OUT/bench.err
echo "bench $?"; grep -v "^bench:" $OUT/bench.txt | tail -14
python3 - <<'PY'
import glob,os,re
out=os.environ['OUT']; rows={}
for f in sorted(glob.glob(out+'/gemv-*.txt')):
    v=f.split('gemv-')[1][:-4]
    for line in open(f):
        m=re.match(r'gemv (\S+ \S+) (\d+x\d+) (m\d) NW=\d+ \(best (\d+): ([\d.]+)\)\s+kern\s+([\d.]+) us.*torch\s+([\d.]+)',line)
        if m: rows.setdefault((m[1],m[2],m[3]),{})[v]=(float(m[6]),float(m[5]),float(m[7]))
vs=['P','E','U']
print('shape'.ljust(40)+''.join(f'{v:>16s}' for v in vs)+'   cuBLAS')
for k,r in rows.items():
    print(' '.join(k).ljust(40)+''.join(f'{r[v][0]:8.2f}({r[v][1]:6.2f})' if v in r else ' '*16 for v in vs)+f'{list(r.values())[0][2]:9.2f}')
PY
