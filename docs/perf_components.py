#!/usr/bin/env python3
# Usage: perf record -F 1999 --call-graph dwarf,16384 -o P.data target/release/leasesim fuzz ...;
#        perf script -i P.data | python3 docs/perf_components.py
"""Attribute perf samples (perf script output on stdin) to components.

Each sample goes to the component of its innermost frame that names one;
allocation (malloc/free/memmove) is counted apart when it is the leaf, and
compiling Lua (apalis's scripts) when any frame is Lua's parser.
"""
import sys, re, collections
CATS = [
    ("allocation and copies", re.compile(r"^(_?mi_|mi_|__memmove|__memcpy|__memset|malloc|free|realloc|alloc::raw_vec|<alloc::raw_vec)")),
    ("SQL text classification", re.compile(r"catalog::(normalize|Catalog::classify|Catalog::recognize)")),
    ("store model (graphile_model)", re.compile(r"leasesim_graphile_model")),
    ("redis model: the script bridge (KEYS/ARGV, redis.call, replies to and from Lua)", re.compile(r"leasesim_redis_model::script::")),
    ("store model (redis model: commands and keyspace)", re.compile(r"leasesim_redis_model")),
    ("Lua VM: mlua's calls in and out", re.compile(r"^(mlua::|<mlua::|mlua_sys::)")),
    ("Lua VM: running scripts", re.compile(r"^(lua[A-Z]_|luaL_|lua_|str_|tab_|math_|auxsort|sweeplist|singlestep|propagatemark|traversetable|markroot|GCTM|rehash|newkey|resize)")),
    ("RESP: replies to bytes and back (apalis's connection)", re.compile(r"leasesim_apalis::resp::|^redis::parser::|<redis::parser::")),
    ("apalis seam: classifying commands", re.compile(r"leasesim_apalis::call::")),
    ("apalis tap: reading rows back", re.compile(r"ApalisStore.*::(tap|rows|last_look)|leasesim_apalis::seam::members")),
    ("engine adapter: store seam and tap", re.compile(r"leasesim_graphile::seam|leasesim_apalis::seam|leasesim_graphile::driver|leasesim_apalis::")),
    ("graphile worker's own code", re.compile(r"graphile_worker")),
    ("apalis worker's own code", re.compile(r"apalis")),
    ("judgement and coverage", re.compile(r"leasesim_check")),
    ("harness world (store node, net, recorder)", re.compile(r"leasesim_world|leasesim_vocab")),
    ("built-in engine", re.compile(r"^leasesim::|<leasesim::")),
    ("madsim scheduler and timers", re.compile(r"madsim|naive_timer|async_task|tokio::|futures_util|futures_core")),
    ("serialization (serde, json)", re.compile(r"serde")),
]
# A script's compilation (luaY_parser under lua_load) is counted apart from
# its running, whatever its innermost frame.
COMPILE = re.compile(r"^(luaY_parser|lua_load|luaD_protectedparser)")
counts = collections.Counter(); total = 0
frames = []
def flush():
    global total, frames
    if not frames: return
    total += 1
    cat = None
    if CATS[0][1].search(frames[0]): cat = CATS[0][0]
    elif any(COMPILE.search(f) for f in frames): cat = "Lua VM: compiling scripts (and the prelude)"
    else:
        for f in frames:
            for name, rx in CATS[1:]:
                if rx.search(f): cat = name; break
            if cat: break
    counts[cat or "other (std, btree, kernel)"] += 1
    frames = []
for line in sys.stdin:
    if not line.strip(): flush(); continue
    if line[0] not in " \t": flush(); continue
    parts = line.strip().split(None, 1)
    if len(parts) == 2:
        sym = re.sub(r"\+0x[0-9a-f]+$", "", parts[1]); sym = re.sub(r" \(.*\)$", "", sym)
        frames.append(sym)
flush()
print("| where the time goes | share of samples |\n|---|---|")
for k, v in counts.most_common():
    print(f"| {k} | {100*v/total:.1f}% |")
print(f"({total} samples)")
