"""Figures of the hour-long Gemma 3 stream from its per-chunk lines (whole or stopped run)."""
import re, statistics, sys, json
from types import SimpleNamespace
from aah.bench.stream import summary
P, TOPICS = 32768, 183359
rows = []
for line in open(sys.argv[1]):
    m = re.match(r"\s*plan \|\s+(\d+) tokens \| ppl\s+([\d.]+) \| KV\s+([\d.]+) MB \|\s+([\d.]+) tok/s", line)
    if m:
        rows.append(SimpleNamespace(position=int(m[1]), perplexity=float(m[2]), kv_mb=float(m[3]), tokens_per_s=float(m[4])))
total = rows[-1].position
s = summary(rows, P, total)
starts = [0] + [r.position for r in rows[:-1]]
seg = lambda lo, hi: [r.perplexity for r, a in zip(rows, starts) if a >= lo and r.position <= hi]
topics_past, modules = seg(P, TOPICS), seg(TOPICS + 1, 10**9)
s["tokens"] = total
s["chunks"] = len(rows)
s["mean_ppl_topics_past_positions"] = statistics.fmean(topics_past) if topics_past else None
s["chunks_topics_past_positions"] = len(topics_past)
s["mean_ppl_modules"] = statistics.fmean(modules) if modules else None
s["chunks_modules"] = len(modules)
s["kv_mb_values"] = sorted({r.kv_mb for r in rows})
s["rate_median_all"] = statistics.median(r.tokens_per_s for r in rows)
print(json.dumps(s, indent=1))
