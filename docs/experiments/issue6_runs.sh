#!/usr/bin/env bash
# The device runs of issue 6, on a GPU host, over a build made here by
# `scripts/ab_prepare --tar REV devrun/NAME` (carry devrun/NAME; devrun/ is git-ignored and does
# not outlive a checkout, so these live here). Few files under $OUT: the device tool returns a
# handful at most.
#
#   docs/experiments/issue6_runs.sh table BUILD DTYPE   issue 6's table (DeepSeek-V3 and gpumode,
#                                                        --check), one line a T
#   docs/experiments/issue6_runs.sh second-t BUILD      43d: token counts repeated in one process,
#                                                        fp16 and bf16 (PERF.md 43d, 44a)
#   docs/experiments/issue6_runs.sh suite BUILD SECONDS the whole GPU suite, line-buffered
#   docs/experiments/issue6_runs.sh decode-energy BUILD  46e: DeepSeek-V3 bf16 T = 8 then 1, the
#                                                        default fused tile against the two-kernel
#                                                        tile of the same shared-memory staging and
#                                                        the register-direct GEMV, each pinned in
#                                                        its own process: time, clock, joules a
#                                                        forward and a byte (a build with --tune)
#   docs/experiments/issue6_runs.sh t512 BUILD           48g: DeepSeek-V3 bf16 T = 512 taken apart:
#                                                        the stage timeline at 512 and 64, then
#                                                        ncu's per-stage table at 512
#   docs/experiments/issue6_runs.sh spread BUILD A       49a: the shared experts' tiles spread (BUILD,
#                                                        branch shared-spread) against A (main's
#                                                        kernels): the swapped and TMA tiles' GPU
#                                                        case on BUILD, then
#                                                        scripts/ab_bench A BUILD at
#                                                        DeepSeek-V3 T = 512, 1024 and 4096 (no
#                                                        spread there: a control), bf16, two
#                                                        rounds
#   docs/experiments/issue6_runs.sh spread-gm BUILD A    49a: the same ab_bench at gpumode T = 512
#                                                        (spread) and 2048 (none), and DeepSeek-V3
#                                                        fp16 T = 512
#   docs/experiments/issue6_runs.sh release BUILD A      50a: the swapped tiles' early stage release
#                                                        (BUILD, branch early-release) against A
#                                                        (main's kernels): scripts/ab_bench A BUILD
#                                                        at DeepSeek-V3 bf16 T = 512 and 1024, two
#                                                        rounds; ncu's per-stage table of BUILD at
#                                                        T = 512; then, if BUILD ran faster at
#                                                        512, the swapped and TMA tiles' GPU case
#                                                        on BUILD
#   docs/experiments/issue6_runs.sh promotion A B C     51b and 51c on one GPU: the 256-byte TMA
#                                                        promotion (B, e.g. main at ec4de99 or
#                                                        branch promo256) against A (main's
#                                                        kernels before it) at DeepSeek-V3 bf16 T
#                                                        = 512, 1024 and 4096, then the cp.async
#                                                        weights' 256-byte L2 prefetch (C, branch
#                                                        cp-prefetch) against B at T = 1, 8, 64,
#                                                        two rounds each, --check
#   docs/experiments/issue6_runs.sh edge BUILD           52e: the rows at issue 6's edge with more
#                                                        forwards (gpumode 2048: 200, DeepSeek-V3
#                                                        16384: 60), bf16, --check: the median and
#                                                        the samples' 10th and 90th percentiles
#   docs/experiments/issue6_runs.sh pairs BUILD [bench]  53a: the swapped tiles in CTA pairs (c2):
#                                                        the swapped and TMA tiles' GPU case on
#                                                        BUILD (not with `bench`), then each c2
#                                                        tile pinned (--check)
#                                                        in turns with the same tile single
#                                                        (--compare-tile) at gpumode 2048 (144)
#                                                        and DeepSeek-V3 8192 (144) and 16384
#                                                        (160), bf16
#   (persist, trace, persist-y32, stagger and spread-decode run a build of main with
#   docs/experiments/decode_persist.patch applied, branch decode-persist.)
#   docs/experiments/issue6_runs.sh persist BUILD [bench] 54a: the fused decode kernel's persistent
#                                                        blocks (pt): the fused tiles' GPU case
#                                                        (not with `bench`), then sp2 and sp2 pt
#                                                        in turns with the default at
#                                                        DeepSeek-V3 and gpumode T = 1, 8, 64,
#                                                        bf16, --check
#   docs/experiments/issue6_runs.sh trace BUILD          54b: the fused decode kernel's items
#                                                        traced (RT_MOE_DECODE_TRACE) at
#                                                        DeepSeek-V3 and
#                                                        gpumode T = 1, bf16, the default and sp2
#                                                        pt: decode_trace.py's summary
#   docs/experiments/issue6_runs.sh persist-y32 BUILD    54c: with fp32 y, the K-half down tiles (k2)
#                                                        against the default, whole and
#                                                        persistent, at DeepSeek-V3 and gpumode
#                                                        T = 1, 8, 64, bf16, --check
#   docs/experiments/issue6_runs.sh stagger BUILD        54d: the shared gate/up tiles in 4 K parts,
#                                                        equal (sp4) and staggered (sp4s): the
#                                                        fused tiles' GPU case, the items traced
#                                                        at DeepSeek-V3 and gpumode T = 1, then
#                                                        both in turns with the default (sp2) at
#                                                        T = 1 and 8, bf16, --check
#   docs/experiments/issue6_runs.sh spread-decode BUILD  54f: the first wave's tickets alternating
#                                                        shared and routed gate/up items (sp2 sw):
#                                                        the fused tiles' GPU case, the items
#                                                        traced at T = 1, then in turns with the
#                                                        default at DeepSeek-V3 and gpumode T = 1
#                                                        and 8, bf16, --check
#   (tail-help, rotate, rate, meta, touch and levers run a build of main with decode_persist.patch and
#   then docs/experiments/tail_help.patch applied, branch tail-help; its traces take 23 words an
#   item.)
#   docs/experiments/issue6_runs.sh tail-help BUILD      55a: tail helpers (sp2 th132, sp2 th264):
#                                                        the fused tiles' GPU case, the items
#                                                        traced at T = 1, then in turns with the
#                                                        default at DeepSeek-V3 and gpumode T = 1
#                                                        and 8, bf16, --check
#   docs/experiments/issue6_runs.sh rotate BUILD         55b: the same for sp2 kr (K loops rotated
#                                                        by column block)
#   docs/experiments/issue6_runs.sh rate BUILD           55c: the weight stream over time at T = 1
#                                                        (decode_rate.py), the default, sp4 and
#                                                        sdl, at DeepSeek-V3 and gpumode, bf16
#   docs/experiments/issue6_runs.sh rate-pr BUILD        57: the same with main's default since
#                                                        985638e (sp2 pr) in place of sp4
#   docs/experiments/issue6_runs.sh meta BUILD           55d: sp2 ml (the items' metadata lines
#                                                        asked of L1 ahead): the fused tiles' GPU
#                                                        case, its stream over time, then in turns
#                                                        with the default at T = 1 and 8, --check
#   docs/experiments/issue6_runs.sh touch BUILD          55e: the same for sp2 tt (the chosen
#                                                        experts' pages touched by the routing)
#   docs/experiments/issue6_runs.sh code BUILD           56b, 56c: pr and oc: their GPU case, their
#                                                        chains at T = 1, then in turns with the
#                                                        default at T = 1 and 8, --check
#   docs/experiments/issue6_runs.sh kick BUILD           56d: sk (with pr): its GPU case, the chains
#                                                        of the default, pr and sk, then pr and sk
#                                                        in turns with the default, --check
#   docs/experiments/issue6_runs.sh landing BUILD A      56e: the fused tiles' GPU case on BUILD,
#                                                        then scripts/ab_bench A BUILD at
#                                                        DeepSeek-V3 and gpumode T = 1, 8, bf16
#   docs/experiments/issue6_runs.sh rolled BUILD [bench] 56b: the same for sp2 pr (each item's
#                                                        prologue a loop); with `bench`, no GPU
#                                                        case
#   docs/experiments/issue6_runs.sh levers BUILD [rate] every lever of 54 to 56 (sdl, sp4, sp4s,
#                                                        sp2 sw, pt, th132, kr, ml, tt, pr, oc) in
#                                                        turns with the default at DeepSeek-V3
#                                                        and gpumode T = 1 and 8, bf16, --check;
#                                                        with `rate`, then the rate mode's traces
#   docs/experiments/issue6_runs.sh probe-tokens BUILD A 50b: an oracle (BUILD, branch
#                                                        probe-tokens-512: the swapped tiles of up
#                                                        to 64 tokens copy no token rows) against
#                                                        A at DeepSeek-V3 bf16 T = 512 and 1024,
#                                                        with the power readings, no --check
#   docs/experiments/issue6_runs.sh wide BUILD [ds]      58e, 59b: the fused tile in stages of 256
#                                                        bytes a weight row (s4, the default since
#                                                        e490447, and s5) in turns with the
#                                                        default at DeepSeek-V3
#                                                        (and gpumode, not with `ds`) T = 1 and
#                                                        8, bf16, --check; then the fused tiles'
#                                                        GPU case
#   docs/experiments/issue6_runs.sh flags BUILD A        59e: TileLoader's row flags (BUILD, branch
#                                                        loader-flags) against A (main's row_at):
#                                                        the wide tiles' DeepSeek-V3 case and the
#                                                        fused tiles' case on BUILD, then
#                                                        scripts/ab_bench A BUILD at DeepSeek-V3
#                                                        and gpumode T = 1, 8, 64 and DeepSeek-V3
#                                                        T = 256 (the two-kernel sm80 tile), bf16
#   docs/experiments/issue6_runs.sh carveout BUILD [big] 57a: every kernel's preferred shared-memory
#                                                        carveout the SM's whole (RT_MOE_SMEM_
#                                                        CARVEOUT=100, a build of branch carveout)
#                                                        against the driver's choice: the stage
#                                                        timelines at DeepSeek-V3 T = 1 and 8,
#                                                        then scripts/ab_bench of the two at
#                                                        DeepSeek-V3 T = 1, 8, 64, 512, bf16,
#                                                        --check; with `big`, also gpumode T = 1,
#                                                        8, 2048, 8192 and DeepSeek-V3 4096, 16384
#   docs/experiments/issue6_runs.sh shared-x BUILD A     68: the shared chunks' x rows by TMA
#                                                        (BUILD, branch shared-x-tma) against A
#                                                        (main's gather): the swapped and TMA
#                                                        tiles' case on BUILD, then
#                                                        scripts/ab_bench A BUILD at gpumode 2048
#                                                        and 8192 (3 rounds) and DeepSeek-V3 4096
#                                                        and 16384 (2 rounds), bf16, --check,
#                                                        then the forward cases with shared
#                                                        experts on BUILD
#   docs/experiments/issue6_runs.sh stalls BUILD         69: where the expert GEMMs' warps wait at
#                                                        gpumode 2048 and 8192 and DeepSeek-V3
#                                                        4096, bf16: ncu WarpStateStats and
#                                                        SourceCounters over one forward (all 7
#                                                        kernels), each report's source page split
#                                                        per kernel; sass_top.py and
#                                                        sass_regions.py of gate/up and down;
#                                                        STALLS="ds16384:deepseek-v3:16384 ..."
#                                                        picks the rows (NAME:PRESET:T)
#   docs/experiments/issue6_runs.sh silu BUILD A         70: silu_mul from ex2.approx and
#                                                        rcp.approx (BUILD, branch fast-silu)
#                                                        against A (main's): scripts/ab_bench A
#                                                        BUILD at gpumode 2048 and 8192 and
#                                                        DeepSeek-V3 1, 8, 4096 and 16384, bf16,
#                                                        --check, 2 rounds; then the whole GPU
#                                                        suite on BUILD (300 s)
#   docs/experiments/issue6_runs.sh kloop BUILD A        71: the swapped K loop per N (BUILD, branch
#                                                        k-loop-per-n) against A (main's):
#                                                        scripts/ab_bench A BUILD at gpumode
#                                                        2048 and 8192 (the TMA tile: a control)
#                                                        and DeepSeek-V3 512, 4096 and 16384,
#                                                        bf16, --check, 2 rounds; then the
#                                                        swapped and TMA tiles' case on BUILD
#   docs/experiments/issue6_runs.sh pfence BUILD A       72: the gathering producer's own proxy
#                                                        fence (BUILD, branch producer-fence)
#                                                        against A (main's); mode depi the same
#                                                        for 73 (branch down-epi: the swapped down
#                                                        epilogue's loads once for both slices):
#                                                        the swapped and TMA tiles' case on BUILD,
#                                                        then
#                                                        scripts/ab_bench A BUILD at gpumode
#                                                        2048 (3 rounds) and DeepSeek-V3 512,
#                                                        4096 and 16384 (2 rounds), bf16, --check
#   docs/experiments/issue6_runs.sh downeven BUILD A     74d: the TMA tile's down K loop without
#                                                        branches (BUILD, branch ws-down-even)
#                                                        against A (version 74), by wsfence's steps
#   docs/experiments/issue6_runs.sh wsfence BUILD A      74: the same fence in the TMA tile's
#                                                        gate/up (BUILD, branch ws-producer-fence)
#                                                        against A: the swapped and TMA tiles'
#                                                        case on BUILD, scripts/ab_bench A BUILD
#                                                        at gpumode 8192 and 2048 (a control),
#                                                        bf16, 3 rounds, and 8192 in fp16, 2
#                                                        rounds, --check; then the gpumode, small
#                                                        and shared-off forward cases on BUILD
set -u
mode=${1:?wsfence, downeven, pfence, depi, kloop, silu, stalls, shared-x, table, carveout, rate-pr, second-t, suite, decode-energy, t512, spread, spread-gm, release, promotion, edge, pairs, persist, persist-y32, trace, stagger, spread-decode, tail-help, rotate, rate, meta, touch, rolled, code, kick, landing, levers or probe-tokens}
build=${2:?a build directory}
out=${OUT:-.}
export RT_MOE_CACHE_DIR=$PWD/$build/kcache
trace_words=6  # the decode trace's words an item (decode_trace)
bench() {  # NAME ARGS...: one bench process, its JSON at $out/NAME.json, its log appended
  local name=$1
  shift
  local start=$SECONDS
  "$build/tools/rt_moe_bench" --no-compile-timing --json "$out/$name.json" "$@" \
    >> "$out/bench.log" 2>&1
  echo "$name rc=$? $((SECONDS - start)) s"
}
ab() {  # NAME BUILD_A BUILD_B BENCH ARGS...: scripts/ab_bench, AB_ROUNDS rounds (default 2),
  # its logs in one tarball
  local name=$1 a=$2 b=$3
  shift 3
  OUT=$out/$name timeout 300 scripts/ab_bench --rounds "${AB_ROUNDS:-2}" "$a" "$b" -- "$@" \
    > "$out/$name.log" 2>&1
  echo "$name rc=$?"
  grep -A20 "B / A" "$out/$name.log"
  grep -ho "check: [A-Z]*" "$out/$name"/ab-*.log | sort | uniq -c
  tar czf "$out/$name-logs.tgz" -C "$out" "$name" && rm -r "${out:?}/$name"
}
gpu_tests() {  # NAME SECONDS [TEST SPEC]: the GPU tests of BUILD (all, or those the spec names)
  local name=$1 seconds=$2 start=$SECONDS
  shift 2
  timeout "$seconds" stdbuf -oL -eL "$build/tests/rt_moe_gpu_tests" --durations yes "$@" \
    > "$out/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - start)) s"
  tail -3 "$out/$name.log"
}
tiles_case="every TMA warp-specialized tile matches the reference*"
decode_trace() {  # PRESET K TILE...: one bench process at T = 1 with RT_MOE_DECODE_TRACE (the
  # patch's), each TILE pinned beside the default; decode_trace.py's summary of every plan's trace
  # (words an item: $trace_words, 6 with decode_persist.patch, 23 with tail_help.patch on it (20
  # before PERF.md 56); with 20 or more, decode_rate.py's stream over time first)
  local preset=$1 k=$2 file parts tile
  shift 2
  local pins=()
  for tile in "$@"; do pins+=(--compare-tile "$tile"); done
  RT_MOE_DECODE_TRACE=$out/$preset timeout 200 "$build/tools/rt_moe_bench" --no-compile-timing \
    --no-power --no-launch-timing --preset "$preset" --dtype bf16 --tokens 1 --iters 5 \
    --warmup 2 "${pins[@]}" >> "$out/trace.log" 2>&1
  echo "$preset trace rc=$?"
  for file in "$out/$preset"-1-*; do
    parts=2
    [[ $file == *sp4* ]] && parts=4
    [[ $file == *sdl ]] && parts=1
    if ((trace_words >= 20)); then
      timeout 60 python3 docs/experiments/decode_rate.py "$file" 7168 2048 1 "$k" "$parts" 2 \
        "$trace_words"
    fi
    timeout 60 python3 docs/experiments/decode_trace.py "$file" 7168 2048 1 "$k" "$parts" 1 64 \
      "$trace_words" | grep -v '^    [0-9]*:[0-9]*('
  done
}
rate_traces() {  # TILE...: decode_trace of 23-word traces (tail_help.patch) at DeepSeek-V3 and
  # gpumode
  local run preset k
  trace_words=23
  for run in "deepseek-v3 8" "gpumode-moe 4"; do
    read -r preset k <<< "$run"
    decode_trace "$preset" "$k" "$@"
  done
}
decode_variants() {  # TILE...: the fused tiles' GPU case, then at DeepSeek-V3 and gpumode each
  # TILE traced at T = 1 (decode_trace) and timed in turns with the default at T = 1 and 8
  local run preset k tile
  local pins=()
  for tile in "$@"; do pins+=(--compare-tile "$tile"); done
  gpu_tests fused 400 "every fused decode tile matches*"
  for run in "deepseek-v3 8" "gpumode-moe 4"; do
    read -r preset k <<< "$run"
    decode_trace "$preset" "$k" "$@"
    bench "$preset" --preset "$preset" --dtype bf16 --tokens 1,8,1,8 --check \
      --no-launch-timing --iters 40 "${pins[@]}"
  done
  grep -h "x the main runtime" "$out/bench.log" | sed 's/: bucket.*router [^:]*:/:/'
  summary "$out/deepseek-v3.json" "$out/gpumode-moe.json"
}
in_turns() {  # TILE...: each TILE in turns with the default at DeepSeek-V3 and gpumode T = 1
  # and 8, bf16, --check
  local preset tile
  local pins=()
  for tile in "$@"; do pins+=(--compare-tile "$tile"); done
  for preset in ${turn_presets:-deepseek-v3 gpumode-moe}; do
    bench "$preset" --preset "$preset" --dtype bf16 --tokens 1,8,1,8 --check \
      --no-launch-timing --iters 40 "${pins[@]}"
  done
  grep -h "x the main runtime" "$out/bench.log" | sed 's/: bucket.*router [^:]*:/:/'
  summary "$out/deepseek-v3.json" "$out/gpumode-moe.json"
}
traced_in_turns() {  # TILE...: rate_traces of the default and each TILE, then in_turns
  rate_traces "$@"
  in_turns "$@"
}
summary() {  # JSON files: one line a T (the median, the samples' 10th and 90th percentiles)
  python3 - "$@" <<'PY'
import json, os, sys
for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as e:
        print(path, "not read:", e)
        continue
    ceil, power = d["ceilings"], d.get("power") or {}
    def over(hbm):  # time / the floor with HBM read rate `hbm` (0: not measured)
        if not hbm:
            return 0
        return r["ms_median"] / (max(r["flops"] / ceil["gemm_flops_per_s"], r["bytes"] / hbm) * 1e3)
    for r in d["results"]:
        p, c = r.get("power") or {}, r.get("check") or {}
        s = sorted(r["ms_samples"])
        q = lambda f: s[min(len(s) - 1, int(f * len(s)))]
        print(f"{os.path.basename(path)} {d['model']['dtype']} T={r['tokens']:6d} "
              f"x_const={r.get('time_over_constant_floor') or 0:.3f} "
              f"x_floor_random_burst={over(ceil.get('hbm_read_random_bytes_per_s')):.3f} "
              f"x_floor_random_steady={over(power.get('hbm_read_random_steady_bytes_per_s')):.3f} "
              f"ms={r['ms_median']:.4f} n={len(s)} q10={q(.1):.4f} q90={q(.9):.4f} "
              f"graph={r['graph_ms_median']:.4f} "
              f"x_floor={r['time_over_floor']:.3f} W={p.get('watts') or 0:.0f} "
              f"MHz={p.get('sm_mhz') or 0:.0f} capped={p.get('power_capped') or 0:.2f} "
              f"x_power_floor={p.get('time_over_power_floor') or 0:.2f} "
              f"check={c.get('pass')} {c.get('rel_l2') or 0:.1e}")
PY
}
case "$mode" in
  pfence | depi)
    a=${3:?build A: main kernels}
    gpu_tests tiles 200 "$tiles_case"
    AB_ROUNDS=3 ab gm "$a" "$build" --preset gpumode-moe --dtype bf16 --check --no-power \
      --tokens 2048
    ab ds "$a" "$build" --preset deepseek-v3 --dtype bf16 --check --no-power \
      --tokens 512,4096,16384
    ;;
  wsfence | downeven)  # PERF.md 74 (BUILD) against main (A); 74d (BUILD) against 74 (A)
    a=${3:?build A}
    gpu_tests tiles 200 "$tiles_case"
    AB_ROUNDS=3 ab gm "$a" "$build" --preset gpumode-moe --dtype bf16 --check --no-power \
      --tokens 8192,2048
    ab gm16 "$a" "$build" --preset gpumode-moe --dtype fp16 --check --no-power --tokens 8192
    gpu_tests forward 90 "gpumode shapes*,shared experts off*,small and odd token counts*"
    ;;
  kloop)
    a=${3:?build A: main kernels}
    ab gm "$a" "$build" --preset gpumode-moe --dtype bf16 --check --no-power --tokens 2048,8192
    ab ds "$a" "$build" --preset deepseek-v3 --dtype bf16 --check --no-power \
      --tokens 512,4096,16384
    gpu_tests tiles 200 "$tiles_case"
    ;;
  silu)
    a=${3:?build A: main kernels}
    ab gm "$a" "$build" --preset gpumode-moe --dtype bf16 --check --no-power --tokens 2048,8192
    ab ds "$a" "$build" --preset deepseek-v3 --dtype bf16 --check --no-power \
      --tokens 1,8,4096,16384
    gpu_tests suite 300
    ;;
  stalls)
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    # STALLS: the rows, NAME:PRESET:T, e.g. "ds16384:deepseek-v3:16384" (72's open question).
    for run in ${STALLS:-gm2048:gpumode-moe:2048 gm8192:gpumode-moe:8192 ds4096:deepseek-v3:4096}; do
      IFS=: read -r name preset tokens <<< "$run"
      start=$SECONDS
      timeout 150 "$ncu" --clock-control none --profile-from-start off \
        --section WarpStateStats --section SourceCounters -o "$out/$name" \
        "$build/tools/rt_moe_bench" --preset "$preset" --dtype bf16 --tokens "$tokens" \
        --iters 1 --warmup 1 --no-compile-timing --no-launch-timing --no-power --profile \
        > "$out/$name-ncu.log" 2>&1
      echo "$name ncu rc=$? $((SECONDS - start)) s"
      "$ncu" --import "$out/$name.ncu-rep" --page details --csv > "$out/$name-details.csv" 2>&1
      "$ncu" --import "$out/$name.ncu-rep" --page source --csv --print-source sass \
        > "$out/$name-sass.csv" 2>&1
      # The source page holds one table a kernel (a header row with a Source column each):
      # router, topk, offsets, scatter, gate_up, down, combine.
      python3 - "$out/$name-sass.csv" "$out/$name" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
heads = [i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r)]
print(sys.argv[1], "tables", len(heads))
names = ["router", "topk", "offsets", "scatter", "gate_up", "down", "combine"]
for k, h in enumerate(heads):
    end = heads[k + 1] if k + 1 < len(heads) else len(rows)
    name = names[k] if len(heads) == len(names) else f"k{k}"
    with open(f"{sys.argv[2]}-{name}.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows[h:end])
PY
      for kernel in gate_up down; do
        [[ -f $out/$name-$kernel.csv ]] || continue
        echo "== $name $kernel"
        timeout 60 python3 docs/experiments/sass_regions.py "$out/$name-$kernel.csv" 2>&1 | tail -4
        timeout 60 python3 docs/experiments/sass_top.py "$out/$name-$kernel.csv" 16 2>&1 \
          | grep -v '^columns'
      done
    done
    rm -f "$out"/*.ncu-rep
    tar czf /tmp/stalls.tgz -C "$out" . && rm -f "$out"/*.csv && mv /tmp/stalls.tgz "$out/"
    ;;
  table)
    dtype=${3:?bf16 or fp16}
    bench "ds-$dtype" --preset deepseek-v3 --dtype "$dtype" --check --tokens 1,8,64,512,4096,16384
    bench "gm-$dtype" --preset gpumode-moe --dtype "$dtype" --check --no-launch-timing \
      --tokens 2048,8192
    summary "$out/ds-$dtype.json" "$out/gm-$dtype.json"
    ;;
  second-t)
    nvidia-smi --query-gpu=timestamp,clocks.mem,clocks.sm,temperature.gpu,temperature.memory,power.draw,clocks_event_reasons.active \
      --format=csv -lms 1000 > "$out/smi.csv" 2>&1 &
    monitor=$!
    export RT_MOE_LOG_LEVEL=debug  # each plan's counters and workspace addresses
    common=(--preset deepseek-v3 --no-launch-timing)
    bench f1 "${common[@]}" --dtype fp16 --tokens 8,1,8,1,8,1,8
    bench f2 "${common[@]}" --dtype fp16 --tokens 1,8,1,8,1,8,1
    bench c1 "${common[@]}" --dtype fp16 --check --tokens 1,8,1,8
    bench b1 "${common[@]}" --dtype bf16 --check --tokens 1,8,1,8
    kill "$monitor"
    summary "$out"/f1.json "$out"/f2.json "$out"/c1.json "$out"/b1.json
    grep -h 'counters at' "$out/bench.log"
    ;;
  shared-x)
    a=${3:?the build to compare with}
    gpu_tests tiles 150 "$tiles_case"
    AB_ROUNDS=3 ab gm "$a" "$build" --preset gpumode-moe --dtype bf16 --check --no-power \
      --tokens 2048,8192
    ab ds "$a" "$build" --preset deepseek-v3 --dtype bf16 --check --no-power --tokens 4096,16384
    gpu_tests forward 90 "gpumode shapes*,shared experts off*,small and odd token counts*"
    ;;
  pairs)
    # `pairs BUILD bench`: the timings only
    [[ "${3:-}" == bench ]] || gpu_tests tiles 300 "$tiles_case"
    for run in "gm 2048 gpumode-moe 144" "ds8192 8192 deepseek-v3 144" \
      "ds16384 16384 deepseek-v3 160"; do
      read -r name tokens preset rows <<< "$run"
      bench "$name" --preset "$preset" --tokens "$tokens" --check --no-launch-timing \
        --tile "sm90swap ${rows}x256x64 s4 c2" --compare-tile "sm90swap ${rows}x256x64 s4"
    done
    grep -h "x the main runtime" "$out/bench.log"
    summary "$out/gm.json" "$out/ds8192.json" "$out/ds16384.json"
    ;;
  persist)
    [[ "${3:-}" == bench ]] || gpu_tests fused 400 "every fused decode tile matches*"
    for preset in deepseek-v3 gpumode-moe; do
      bench "$preset" --preset "$preset" --dtype bf16 --tokens 1,8,64,1 --check \
        --no-launch-timing --iters 40 --compare-tile "fused 16x64x64 w1x4 s8 sdl sp2" \
        --compare-tile "fused 16x64x64 w1x4 s8 sdl sp2 pt"
    done
    grep -h -B2 -A8 "x the main runtime" "$out/bench.log"
    summary "$out/deepseek-v3.json" "$out/gpumode-moe.json"
    ;;
  persist-y32)
    for preset in deepseek-v3 gpumode-moe; do
      bench "y32-$preset" --preset "$preset" --dtype bf16 --y-dtype fp32 --tokens 1,8,64,1 \
        --check --no-launch-timing --iters 40 --compare-tile "fused 16x64x64 w1x4 s8 sdl k2" \
        --compare-tile "fused 16x64x64 w1x4 s8 sdl k2 sp2 pt" \
        --compare-tile "fused 16x64x64 w1x4 s8 sdl sp2 pt"
    done
    grep -h "x the main runtime" "$out/bench.log" | sed 's/: bucket.*router [^:]*:/:/'
    summary "$out/y32-deepseek-v3.json" "$out/y32-gpumode-moe.json"
    ;;
  stagger)
    decode_variants "fused 16x64x64 w1x4 s8 sdl sp4" "fused 16x64x64 w1x4 s8 sdl sp4s"
    ;;
  spread-decode)
    decode_variants "fused 16x64x64 w1x4 s8 sdl sp2 sw"
    ;;
  tail-help)  # PERF.md 55: the tail helpers (a build of tail_help.patch)
    trace_words=23
    decode_variants "fused 16x64x64 w1x4 s8 sdl sp2 th132" "fused 16x64x64 w1x4 s8 sdl sp2 th264"
    ;;
  rotate)  # PERF.md 55: the K loops rotated by column block (a build of tail_help.patch)
    trace_words=23
    decode_variants "fused 16x64x64 w1x4 s8 sdl sp2 kr"
    ;;
  meta | touch | rolled)  # PERF.md 55, 56 (a build of tail_help.patch): the metadata chains'
    # lines asked of L1 ahead (ml), the chosen experts' pages touched by the routing block (tt), or
    # each item's prologue a loop (pr; `rolled BUILD bench`: without the GPU case)
    tile="fused 16x64x64 w1x4 s8 sdl sp2 ml"
    [[ $mode == touch ]] && tile="fused 16x64x64 w1x4 s8 sdl sp2 tt"
    [[ $mode == rolled ]] && tile="fused 16x64x64 w1x4 s8 sdl sp2 pr"
    [[ "${3:-}" == bench ]] || gpu_tests fused 400 "every fused decode tile matches*"
    traced_in_turns "$tile"
    ;;
  code)  # PERF.md 56: pr and oc (a build of tail_help.patch): the fused tiles' GPU case for those
    # two (RT_MOE_TEST_FUSED_TILES), their chains traced at T = 1, then in turns with the default
    # at DeepSeek-V3 and gpumode T = 1 and 8, bf16, --check
    RT_MOE_TEST_FUSED_TILES=" pr, oc" gpu_tests fused 300 "every fused decode tile matches*"
    traced_in_turns "fused 16x64x64 w1x4 s8 sdl sp2 pr" "fused 16x64x64 w1x4 s8 sdl sp2 oc"
    ;;
  kick)  # PERF.md 56: sk (with pr; a build of tail_help.patch): its GPU case, the chains of the
    # default, pr and sk traced at T = 1, then pr and sk in turns with the default at T = 1 and 8
    RT_MOE_TEST_FUSED_TILES=" sk" gpu_tests fused 200 "every fused decode tile matches*"
    traced_in_turns "fused 16x64x64 w1x4 s8 sdl sp2 pr" "fused 16x64x64 w1x4 s8 sdl sp2 pr sk"
    ;;
  landing)  # PERF.md 56: a build with a change to land (BUILD) against main's (A): the fused
    # tiles' GPU case on BUILD, then scripts/ab_bench A BUILD at DeepSeek-V3 and gpumode T = 1
    # and 8, bf16, two rounds each
    a=${3:?the base build}
    gpu_tests fused 300 "every fused decode tile matches*"
    ab ds "$a" "$build" --preset deepseek-v3 --dtype bf16 --tokens 1,8 --check
    ab gm "$a" "$build" --preset gpumode-moe --dtype bf16 --tokens 1,8 --check
    ;;
  wide)  # PERF.md 58e, 59b: the fused tile in stages of 256 bytes a weight row: each tile in
    # turns with the default, then the fused tiles' GPU case. Since e490447 the default is s4
    # (sp2), so the stages of 64 it replaced and s5 are the turns; before it (59b's build), s4, s5.
    [[ "${3:-}" == ds ]] && turn_presets=deepseek-v3
    in_turns "fused 16x64x64 w1x4 s8 sdl sp2" "fused 16x64x128 w1x4 s5 sdl sp2"
    gpu_tests fused 200 "every fused decode tile matches*"
    ;;
  rate)  # PERF.md 55: the weight stream over time at T = 1 (23-word traces, a build of tail_help.patch)
    rate_traces "fused 16x64x64 w1x4 s8 sdl sp4" "fused 16x64x64 w1x4 s8 sdl"
    ;;
  rate-pr)  # PERF.md 57: the same for main's default since 985638e (sp2 pr) and sdl
    rate_traces "fused 16x64x64 w1x4 s8 sdl sp2 pr" "fused 16x64x64 w1x4 s8 sdl"
    ;;
  levers)  # PERF.md 56: every decode lever of 54 to 56 in turns with the default on one GPU (an
    # H200: they were measured on H100s only), DeepSeek-V3 and gpumode T = 1 and 8, bf16, --check
    # (a build of tail_help.patch); then the H200's stream over time (rate)
    tiles=()
    for tile in sdl "sdl sp4" "sdl sp4s" "sdl sp2 sw" "sdl sp2 pt" "sdl sp2 th132" "sdl sp2 kr" \
      "sdl sp2 ml" "sdl sp2 tt" "sdl sp2 pr" "sdl sp2 oc"; do
      tiles+=("fused 16x64x64 w1x4 s8 $tile")
    done
    in_turns "${tiles[@]}"
    [[ "${3:-}" == rate ]] && rate_traces "fused 16x64x64 w1x4 s8 sdl sp4" "fused 16x64x64 w1x4 s8 sdl"
    ;;
  trace)
    decode_trace deepseek-v3 8 "fused 16x64x64 w1x4 s8 sdl sp2 pt"
    decode_trace gpumode-moe 4 "fused 16x64x64 w1x4 s8 sdl sp2 pt"
    ;;
  flags)  # PERF.md 59e: TileLoader's flags for zero-filled rows against row_at (BUILD against A)
    a=${3:?a build of main, A}
    gpu_tests wide 200 "the wide fused tiles*"
    gpu_tests fused 200 "every fused decode tile matches*"
    ab ds "$a" "$build" --preset deepseek-v3 --dtype bf16 --tokens 1,8,64,256 --check
    ab gm "$a" "$build" --preset gpumode-moe --dtype bf16 --tokens 1,8,64 --check
    ;;
  suite)
    seconds=${3:?a time limit in seconds}
    gpu_tests suite "$seconds"
    ;;
  decode-energy)
    # Each tile twice, in two orders, each its own process (the power table is the main
    # runtime's, so a pinned tile gets its own); --tokens 8,1: T = 1 after a warm T = 8.
    tiles=("" "sm80 16x64x64 w1x4 s8" "gemv r8 w8 s2" "gemv r8 w4 s2")
    for round in 1 2; do
      for i in 0 1 2 3; do
        j=$(((round == 1) ? i : 3 - i))
        pin=()
        [[ -n ${tiles[j]} ]] && pin=(--tile "${tiles[j]}")
        bench "e$round-$j" --preset deepseek-v3 --dtype bf16 --check --tokens 8,1 "${pin[@]}"
      done
    done
    python3 - "$out" <<'PY'
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "e[12]-*.json"))):
    d = json.load(open(path))
    for r in d["results"]:
        p, c = r.get("power") or {}, r.get("check") or {}
        j = p.get("joules_per_forward") or 0
        tile = r["plan"].split("grouped GEMM ")[-1].split(",")[0]
        print(f"{os.path.basename(path)} T={r['tokens']} tile='{tile}' ms={r['ms_median']:.4f} "
              f"x_floor={r['time_over_floor']:.3f} W={p.get('watts') or 0:.0f} "
              f"MHz={p.get('sm_mhz') or 0:.0f} capped={p.get('power_capped') or 0:.2f} "
              f"J={j:.4f} pJ/B={j / r['bytes'] * 1e12:.1f} check={c.get('pass')}")
PY
    ;;
  t512)
    RT_MOE_STAGE_TIMELINE=1 timeout 150 "$build/tools/rt_moe_bench" --no-compile-timing \
      --preset deepseek-v3 --dtype bf16 --tokens 512,64 --timeline 3 --no-power > "$out/tl.log" 2>&1
    echo "timeline rc=$?"
    grep -v "^diagnostic" "$out/tl.log" | grep -A12 "^timeline\|time/floor" | cut -c1-220
    timeout 240 scripts/profile --tokens 512 "$build" > "$out/profile.txt" 2>&1
    echo "profile rc=$?"
    tail -30 "$out/profile.txt" | cut -c1-220
    ;;
  spread)
    a=${3:?build A: main kernels}
    gpu_tests cases 260 "$tiles_case"
    ab ab "$a" "$build" --preset deepseek-v3 --dtype bf16 --check --no-power \
      --tokens 512,1024,4096
    ;;
  spread-gm)
    a=${3:?build A: main kernels}
    ab gm "$a" "$build" --preset gpumode-moe --dtype bf16 --check --no-power --tokens 512,2048
    ab fp16 "$a" "$build" --preset deepseek-v3 --dtype fp16 --check --no-power --tokens 512
    ;;
  release)
    a=${3:?build A: main kernels}
    ab ab "$a" "$build" --preset deepseek-v3 --dtype bf16 --check --no-power --tokens 512,1024
    # ncu's per-stage table of BUILD at T = 512 (A's is 49d's).
    mkdir -p "$out/prof"
    OUT=$out/prof timeout 120 scripts/profile --tokens 512 "$build" > "$out/prof.log" 2>&1
    echo "prof rc=$?"
    tail -14 "$out/prof.log" | cut -c1-200
    # The GPU case only where BUILD ran faster at T = 512 (B / A under 0.995): a candidate to land.
    ratio=$(awk '$1 == 512 && NF >= 4 {print $NF}' "$out/ab.log" | tail -1)
    if awk -v r="${ratio:-1}" 'BEGIN {exit !(r < 0.995)}'; then
      gpu_tests cases 200 "$tiles_case"
    else
      echo "T = 512 B / A ${ratio:-unread}: no GPU case"
    fi
    ;;
  carveout)
    # B: the same build, every kernel's carveout 100% (a wrapper of its bench, its kernel cache)
    wrapped=$build-cv100
    mkdir -p "$wrapped/tools"
    ln -sfn "$PWD/$build/kcache" "$wrapped/kcache"
    printf '#!/bin/sh\nRT_MOE_SMEM_CARVEOUT=100 exec "%s" "$@"\n' "$PWD/$build/tools/rt_moe_bench" \
      > "$wrapped/tools/rt_moe_bench"
    chmod +x "$wrapped/tools/rt_moe_bench"
    for cv in "" 100; do
      RT_MOE_STAGE_TIMELINE=1 RT_MOE_SMEM_CARVEOUT=$cv bench "timeline$cv" --preset deepseek-v3 \
        --dtype bf16 --tokens 1,8 --timeline 4 --iters 5 --warmup 2 --no-launch-timing --no-power
      grep -A6 "^timeline T" "$out/bench.log" | tail -14 | sed "s/^/cv=${cv:-driver} /"
    done
    ab ds "$build" "$wrapped" --preset deepseek-v3 --dtype bf16 --check --tokens 1,8,64,512
    if [[ "${3:-}" == big ]]; then
      ab gm "$build" "$wrapped" --preset gpumode-moe --dtype bf16 --check --tokens 1,8
      ab ds-big "$build" "$wrapped" --preset deepseek-v3 --dtype bf16 --check --tokens 4096,16384
      ab gm-big "$build" "$wrapped" --preset gpumode-moe --dtype bf16 --check --tokens 2048,8192
    fi
    ;;
  probe-tokens)
    a=${3:?build A: main kernels}
    # An oracle (wrong results, so no --check): the power readings say whether its zero token
    # operands moved the clock.
    ab probe "$a" "$build" --preset deepseek-v3 --dtype bf16 --tokens 512,1024
    ;;
  promotion)
    # BUILD is A here (the first build named), then B and C.
    b=${3:?build B: the 256-byte TMA promotion}
    c=${4:?build C: the cp.async 256-byte prefetch}
    ab tma "$build" "$b" --preset deepseek-v3 --dtype bf16 --check --no-power \
      --tokens 512,1024,4096
    ab cp "$b" "$c" --preset deepseek-v3 --dtype bf16 --check --no-power --tokens 1,8,64
    ;;
  edge)
    bench gm2048 --preset gpumode-moe --dtype bf16 --check --no-launch-timing --tokens 2048 \
      --iters 200
    bench ds16k --preset deepseek-v3 --dtype bf16 --check --no-launch-timing --tokens 16384 \
      --iters 60
    summary "$out/gm2048.json" "$out/ds16k.json"
    ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
