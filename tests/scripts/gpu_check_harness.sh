#!/usr/bin/env bash
# Runs scripts/gpu_check.sh on a machine without a GPU, against fake executables, so that a bug in
# the script is found here rather than in the GPU machine's few minutes (ctest:
# Scripts.GpuCheckRunsOnFakeExecutables).
#
# Each scenario lays out a fresh bundle in a temp folder as scripts/gpu_bundle.sh does (DIR/
# gpu_check.sh and the python scripts beside it, DIR/bin/, DIR/lib/, DIR/configs/, DIR/COMMIT), with
# small bash stand-ins for bin/adacc, bin/bench_gpu and bin/test_cuda_device (and for llm.c's
# train_gpt2cu, which call 3 is given by LLMC_TRAIN_GPT2CU), and, first on a PATH of
# its own, for nvidia-smi, compute-sanitizer and python3; CUDA_HOME is a fake toolkit holding only an
# empty lib64/libcublasLt.so.13, so this machine's own toolkit and GPU libraries play no part. Every
# fake appends its argv, one line, to the scenario's argv.log, and prints what the real program
# prints where gpu_check.sh parses it. The fake python3 is the real one run with -I -S: no site-
# packages, so the Hugging Face and PyTorch-peer steps take their "no torch" path (whether or not
# this machine has torch) and python's search for pip's nvidia-* wheels finds none.
#
# Scenarios (each a function below; the harness goes on after a failed check and exits 1 naming every
# one that failed):
#   call2_healthy        call 2, every fake healthy
#   call1_healthy        call 1, every fake healthy (the torch steps skip)
#   shard_time_given_back  the first step that writes the random token shard loses the shard's seconds
#   shard_killed         a shard writer killed at its timeout leaves nothing the next step trusts
#   hung_steps           a step that ignores TERM and one that does not: both TIMEOUT, the call goes on
#   budget               GPU_CHECK_BUDGET_S cuts the steps' timeouts, or skips them when it is spent
#   no_gpu               nvidia-smi fails: exit 2 in the preflight
#   missing_library      bin/adacc a real executable whose shared library is gone: exit 3 naming it
#   no_usable_device     test_cuda_device skips every test for want of a device: device_tests FAILs
#   call3_llmc           call 3 with a stand-in llm.c: both presets, llm.c's faster variant, the ratio
#   call3_without_llmc   call 3 without LLMC_TRAIN_GPT2CU: the step skips, saying what to set
# Timeouts: GPU_CHECK_TIME_SCALE 0.25 where nothing should time out (the smallest timeout stays 1 s,
# python's 2 MiB shard, 0.4 s here, gets 3 s), 0.02 and 0.2 where something is meant to; the whole
# harness takes about 25 s.
#
# Usage: bash tests/scripts/gpu_check_harness.sh     (KEEP=1 keeps its temp folder)
# The compound checks, `expect WHAT eval '...'`, are single-quoted on purpose:
# shellcheck disable=SC2016
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
GPU_CHECK="$ROOT/scripts/gpu_check.sh"
REAL_PYTHON3="$(command -v python3)" || { echo "gpu_check_harness: needs python3 (the shard writer is real)" >&2; exit 1; }

T="$(mktemp -d /tmp/gpu_check_harness.XXXXXX)"
cleanup() {
  local f
  # A hung fake that outlived its timeout is a failure reported below; do not leave it running.
  for f in "$T"/*/state/hung.*.pid; do [ -f "$f" ] && ! pid_gone "$f" && kill -KILL "$(cat "$f")"; done
  if [ -n "${KEEP:-}" ] || [ "${#FAILURES[@]}" -gt 0 ]; then echo "gpu_check_harness: files kept in $T"
  else rm -rf "$T"; fi
}
trap cleanup EXIT

# What the fakes report: the free memory nvidia-smi gives the preflight and, later, max_batch_4.7b's
# own probe (different, so the test sees which one the budget came from), and adacc's largest batch of
# gpt-4.7b (no other mode's batch is the same, so a wrong row is seen).
FREE_AT_PREFLIGHT_MIB=143150
FREE_AT_PROBE_MIB=141000
ADACC_BATCH_4_7B=133
# random_token_shard.py's file for 2^20 tokens: a header of 256 int32, then the ids as uint16.
SHARD_BYTES=$((256 * 4 + (1 << 20) * 2))
# No call here takes over 15 s; the guard is for a call that would never end.
CALL_GUARD_S=90

# ---------------------------------------------------------------------------------------------
# The fakes.

mkdir -p "$T/fakebin" "$T/cuda/lib64"
: > "$T/cuda/lib64/libcublasLt.so.13"  # the preflight only checks that it is there

cat > "$T/fake_common.sh" << 'EOF'
# Sourced by every fake. log_argv NAME ARGS...: one line in $FAKE_LOG (a newline inside an argument
# written as \n).
log_argv() {
  local line=$1 a
  shift
  for a in "$@"; do line+=" ${a//$'\n'/\\n}"; done
  echo "$line" >> "$FAKE_LOG"
}
# maybe_hang KEY: never returns when KEY is in FAKE_HANG (ends at TERM) or FAKE_HANG_STUBBORN (ignores
# TERM, as a wedged kernel can: only KILL ends it); its pid goes to $FAKE_STATE/hung.KEY.pid.
maybe_hang() {
  if [[ " ${FAKE_HANG_STUBBORN:-} " == *" $1 "* ]]; then trap '' TERM
  elif [[ " ${FAKE_HANG:-} " != *" $1 "* ]]; then return 0; fi
  echo "fake: $1 hangs"
  echo $$ > "$FAKE_STATE/hung.$1.pid"
  exec sleep 600
}
EOF

cat > "$T/fakebin/nvidia-smi" << 'EOF'
#!/usr/bin/env bash
# Fake nvidia-smi: one H200 (FAKE_NO_GPU: the driver unreachable). The csv queries answer with the
# free memory the harness chose for the preflight and for the later probe.
. "$FAKE_COMMON"
log_argv nvidia-smi "$@"
if [ -n "${FAKE_NO_GPU:-}" ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
  exit 9
fi
case "$*" in
  "")
    echo "| NVIDIA-SMI 580.95.05      Driver Version: 580.95.05      CUDA Version: 13.0     |"
    echo "|   0  NVIDIA H200      On  |   00000000:19:00.0 Off |      0 |"
    ;;
  "--query-gpu=name,driver_version,memory.total,memory.used,memory.free --format=csv,noheader,nounits")
    echo "NVIDIA H200, 580.95.05, 143771, $((143771 - FAKE_FREE_AT_PREFLIGHT_MIB)), $FAKE_FREE_AT_PREFLIGHT_MIB" ;;
  "--query-gpu=memory.free --format=csv,noheader,nounits") echo "$FAKE_FREE_AT_PROBE_MIB" ;;
  *) echo "fake nvidia-smi: arguments it does not mimic: $*" >&2; exit 2 ;;
esac
EOF

cat > "$T/fakebin/compute-sanitizer" << 'EOF'
#!/usr/bin/env bash
# Fake compute-sanitizer: runs the program after its options, then reports no error.
. "$FAKE_COMMON"
log_argv compute-sanitizer "$@"
tool=memcheck
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --error-exitcode) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
echo "========= COMPUTE-SANITIZER"
maybe_hang "sanitizer-$tool"
"$@"
rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit "$rc"
EOF

cat > "$T/fakebin/python3" << 'EOF'
#!/usr/bin/env bash
# Fake python3: the real one without site-packages (-I -S). The shard writer can be slowed
# (FAKE_SHARD_SLEEP seconds first) or, the first time only, made to write part of its file and hang
# (FAKE_HANG=random_token_shard); its seconds, start to end, go to $FAKE_STATE/shard_seconds.
. "$FAKE_COMMON"
log_argv python3 "$@"
[ "${1##*/}" = random_token_shard.py ] || exec "$FAKE_REAL_PYTHON3" -I -S "$@"
t0=$(date +%s.%N)
sleep "${FAKE_SHARD_SLEEP:-0}"
if [ ! -e "$FAKE_STATE/shard_written_once" ]; then
  : > "$FAKE_STATE/shard_written_once"
  [[ " ${FAKE_HANG:-} " == *" random_token_shard "* ]] && head -c 4096 /dev/zero > "$2"
  maybe_hang random_token_shard
fi
"$FAKE_REAL_PYTHON3" -I -S "$@"
rc=$?
echo "$t0 $(date +%s.%N)" | awk '{ print $2 - $1 }' >> "$FAKE_STATE/shard_seconds"
exit "$rc"
EOF

cat > "$T/test_cuda_device" << 'EOF'
#!/usr/bin/env bash
# Fake test_cuda_device: gtest's output, every test passed or (FAKE_NO_DEVICE) every test skipped
# with the device tests' own message; --gtest_output=json:FILE written.
. "$FAKE_COMMON"
log_argv test_cuda_device "$@"
maybe_hang test_cuda_device
for a in "$@"; do
  case "$a" in --gtest_output=json:*) echo '{"tests": 57}' > "${a#--gtest_output=json:}" ;; esac
done
echo "[==========] Running 57 tests from 9 test suites."
if [ -n "${FAKE_NO_DEVICE:-}" ]; then
  echo "[ RUN      ] CudaOps.EveryCaseOfTheTableMatchesTheCpuBackend"
  echo "tests/cuda/test_cuda_ops.cpp:40: Skipped"
  echo "no CUDA device (no CUDA-capable device is detected): skipped"
  echo "[  SKIPPED ] CudaOps.EveryCaseOfTheTableMatchesTheCpuBackend (0 ms)"
  echo "[==========] 57 tests from 9 test suites ran. (3 ms total)"
  echo "[  PASSED  ] 0 tests."
  echo "[  SKIPPED ] 57 tests, listed below:"
else
  echo "[ RUN      ] CudaOps.EveryCaseOfTheTableMatchesTheCpuBackend"
  echo "[       OK ] CudaOps.EveryCaseOfTheTableMatchesTheCpuBackend (812 ms)"
  echo "[==========] 57 tests from 9 test suites ran. (4012 ms total)"
  echo "[  PASSED  ] 57 tests."
fi
EOF

cat > "$T/bench_gpu" << 'EOF'
#!/usr/bin/env bash
# Fake bench_gpu: a table per preset (--per-op: per op family); --json FILE written.
. "$FAKE_COMMON"
log_argv bench_gpu "$@"
per_op=""
while [ $# -gt 0 ]; do
  case "$1" in
    --per-op) per_op=1; shift ;;
    --json) echo '{"presets": []}' > "$2"; shift 2 ;;
    *) shift ;;
  esac
done
maybe_hang "bench_gpu${per_op:+-per-op}"
echo "preset     dtype  batch  step ms  tokens/s    MFU"
echo "gpt-117m   bf16      32    210.5    155660  0.412"
echo "gpt-345m   bf16      16    285.1     57465  0.447"
[ -n "$per_op" ] && echo "matmul     61.2 ms  0.71 of the step  roofline 0.58"
exit 0
EOF

cat > "$T/adacc" << 'EOF'
#!/usr/bin/env bash
# Fake adacc: memory (the mode table whose last column is the largest batch; gpt-4.7b's adacc row
# says FAKE_ADACC_BATCH_4_7B), compare and train (each records the token shard it was given and its
# size in $FAKE_STATE/shards.txt; compare --format csv: its csv, 130 ms a step at batch 64 x 1024),
# config --toml (a preset's [model]).
. "$FAKE_COMMON"
log_argv adacc "$@"
sub=$1 config="" shard="" preset="" format=table
shift
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config="$(basename "$2" .toml)"; shift 2 ;;
    --set) [[ "$2" == data.train=* ]] && shard="${2#data.train=}"
           [[ "$2" == model.preset=* ]] && preset="${2#model.preset=}"; shift 2 ;;
    --format) format=$2; shift 2 ;;
    *) shift ;;
  esac
done
maybe_hang "adacc-$sub-$config"
case "$sub" in
  memory)
    echo "mode                params        grads        adamw         tape        total   max_batch"
    if [ "$config" = gpt-4.7b ]; then
      echo "none              8.75 GiB     8.75 GiB    17.50 GiB    95.12 GiB   132.11 GiB   12"
      echo "full              8.75 GiB     8.75 GiB    17.50 GiB     6.71 GiB    45.20 GiB   140"
      echo "selective         8.75 GiB     8.75 GiB    17.50 GiB    95.12 GiB   132.11 GiB   12"
      echo "quant             8.75 GiB     8.75 GiB    17.50 GiB    19.02 GiB    57.51 GiB   60"
      echo "adacc             8.75 GiB     8.75 GiB    17.50 GiB    95.12 GiB   132.11 GiB   $FAKE_ADACC_BATCH_4_7B"
    else
      echo "none              1.32 GiB     1.32 GiB     2.64 GiB    12.08 GiB    17.99 GiB   33"
      echo "full              1.32 GiB     1.32 GiB     2.64 GiB   847.06 MiB     7.21 GiB   244"
      echo "selective         1.32 GiB     1.32 GiB     2.64 GiB    12.08 GiB    17.99 GiB   33"
      echo "quant             1.32 GiB     1.32 GiB     2.64 GiB     2.41 GiB     8.79 GiB   84"
      echo "adacc             1.32 GiB     1.32 GiB     2.64 GiB    12.08 GiB    17.99 GiB   244"
      echo "recompute-opt     1.32 GiB     1.32 GiB     2.64 GiB    12.08 GiB    17.99 GiB   244"
    fi
    ;;
  compare | train)
    echo "$sub $config $shard $(stat -c %s "$shard" 2>/dev/null || echo missing)" >> "$FAKE_STATE/shards.txt"
    if [ "$sub" = compare ] && [ "$format" = csv ]; then
      echo "compare: none batch 64 ..."
      echo "mode,batch,seq,tape_peak_bytes,total_bytes,step_ms,tokens_per_s,loss,timed_steps,interleaved"
      echo "none,64,1024,1,25769803776,130.00,504123.1,10.98,10,no"
    elif [ "$sub" = compare ]; then
      echo "compare: $config on cuda"
      echo "mode    batch  step ms (median, IQR)  tokens/s"
      echo "adacc      32   512.3 (2.1)           63960"
    else
      echo "memory (none on cuda, bf16): params 1.32 GiB, total 17.99 GiB"
      echo "memory: accounted 17.99 GiB, the device's memory in use 18.40 GiB (cudaMemGetInfo)"
    fi
    ;;
  config)
    case "$preset" in
      gpt-117m) echo '[model]'; echo 'n_layer = 12'; echo 'n_embd = 768'; echo 'n_head = 12' ;;
      gpt-345m) echo '[model]'; echo 'n_layer = 24'; echo 'n_embd = 1024'; echo 'n_head = 16' ;;
      *) echo "fake adacc: no preset '$preset'" >&2; exit 2 ;;
    esac
    echo 'vocab_size = 50257'; echo 'max_seq_len = 1024'
    ;;
  *) echo "fake adacc: no subcommand '$sub'" >&2; exit 2 ;;
esac
EOF

cat > "$T/train_gpt2cu" << 'EOF'
#!/usr/bin/env bash
# Fake llm.c train_gpt2cu: llm.c's per-step lines for its -x steps, 100 ms a step, 95 with -ge 2.
. "$FAKE_COMMON"
log_argv train_gpt2cu "$@"
steps=1 ms=100.00
while [ $# -gt 0 ]; do
  case "$1" in
    -x) steps=$2; shift 2 ;;
    -ge) [ "$2" = 2 ] && ms=95.00; shift 2 ;;
    *) shift 2 ;;
  esac
done
echo "| device                | NVIDIA H200                                        |"
echo "device memory usage: 61234 MiB / 143771 MiB"
echo "memory per sequence: 900 MiB"
echo " -> estimated maximum batch size: 155"
echo "val loss 10.988"
for ((s = 1; s <= steps; s++)); do
  echo "step $(printf '%4d' "$s")/$steps | loss 10.950000 (+0.00z)| norm 1.0000 (+0.00z)| lr 3.00e-04 | $ms ms | -100.0% bf16 MFU | 655360 tok/s"
done
EOF
chmod +x "$T/fakebin"/* "$T/test_cuda_device" "$T/bench_gpu" "$T/adacc" "$T/train_gpt2cu"

# make_bundle DIR: the layout of scripts/gpu_bundle.sh, its scripts read from its own `cp` line so the
# two cannot drift apart, with the fakes in bin/.
make_bundle() {
  local dir=$1 scripts=()
  read -ra scripts <<< "$(sed -n 's|^cp \(scripts/gpu_check\.sh .*\) "[$]DIR/"$|\1|p' "$ROOT/scripts/gpu_bundle.sh")"
  [ "${#scripts[@]}" -gt 0 ] || { echo "gpu_check_harness: no 'cp scripts/gpu_check.sh ...' line in scripts/gpu_bundle.sh" >&2; exit 1; }
  mkdir -p "$dir/bin" "$dir/lib" "$dir/configs"
  (cd "$ROOT" && cp "${scripts[@]}" "$dir/") || exit 1
  cp "$ROOT"/configs/*.toml "$dir/configs/"
  echo harness > "$dir/COMMIT"
  cp "$T/adacc" "$T/bench_gpu" "$T/test_cuda_device" "$dir/bin/"
}

# ---------------------------------------------------------------------------------------------
# Running a call and reading what it left.

FAILURES=()
SCENARIO=""

fail() {
  echo "  FAIL: $*"
  FAILURES+=("$SCENARIO: $*")
}
# expect WHAT CMD...: a check, passed when CMD succeeds. A compound check is `expect WHAT eval '...'`,
# single-quoted so that it is evaluated then, not when expect is called.
expect() {
  local what=$1
  shift
  if "$@"; then echo "  ok: $what"; else fail "$what"; fi
}

# new_scenario NAME: S, a fresh folder with a bundle, a results folder and the fakes' state.
new_scenario() {
  SCENARIO=$1 S="$T/$1"
  echo "== $1"
  mkdir -p "$S/out" "$S/state"
  : > "$S/argv.log"
  make_bundle "$S/bundle"
}

# run_call CALL [VAR=VALUE ...]: gpu_check.sh CALL from the scenario's bundle with the fakes first on
# PATH, the fake toolkit and the harness's timescale, VARs last; sets RC, CALL_S (its seconds), WORK
# (the tarball's folder, extracted) and SUMMARY.
run_call() {
  local call=$1 t0=$SECONDS
  shift
  # The call under a guard of its own, so that a script that hangs fails this harness, not stalls it.
  timeout -k 5 "$CALL_GUARD_S" env -u GPU_CHECK_STEPS -u GPU_CHECK_BUDGET_S -u CUDA_VISIBLE_DEVICES -u LD_LIBRARY_PATH \
    PATH="$T/fakebin:$PATH" CUDA_HOME="$T/cuda" OUT="$S/out" GPU_CHECK_TIME_SCALE=0.25 \
    FAKE_COMMON="$T/fake_common.sh" FAKE_LOG="$S/argv.log" FAKE_STATE="$S/state" \
    FAKE_REAL_PYTHON3="$REAL_PYTHON3" FAKE_FREE_AT_PREFLIGHT_MIB=$FREE_AT_PREFLIGHT_MIB \
    FAKE_FREE_AT_PROBE_MIB=$FREE_AT_PROBE_MIB FAKE_ADACC_BATCH_4_7B=$ADACC_BATCH_4_7B \
    "$@" bash "$S/bundle/gpu_check.sh" "$call" > "$S/stdout" 2>&1
  RC=$? CALL_S=$((SECONDS - t0))
  [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ] && fail "the call did not end within $CALL_GUARD_S s"
  WORK="$S/tar/gpu_check_call$call" SUMMARY="$S/tar/gpu_check_call$call/summary.txt"
  mkdir -p "$S/tar"
  tar -C "$S/tar" -xzf "$S/out/gpu_check_call$call.tar.gz" 2>/dev/null || fail "no readable $S/out/gpu_check_call$call.tar.gz"
  echo "  (exit $RC in $CALL_S s; its output: $S/stdout)"
}

# The summary's line of a step: status, name, seconds, "s of", limit, note.
step_line() { awk -v n="$1" '$1 ~ /^(PASS|FAIL|TIMEOUT|SKIP)$/ && $2 == n' "$SUMMARY" 2>/dev/null; }
status_is() { [ "$(step_line "$1" | awk '{print $1}')" = "$2" ]; }
note_has() { step_line "$1" | grep -qF -- "$2"; }
# The steps of a call and their timeouts, from --plan: "NAME SECONDS" lines.
plan_of() { bash "$GPU_CHECK" --plan | awk -v c="$1" '/^call / {k = $2} k == c && /^  / && $1 != "sum" {print $1, $2}'; }
# A timeout scaled as GPU_CHECK_TIME_SCALE promises: rounded to whole seconds, at least 1.
scaled_ref() { awk -v n="$1" -v s="$2" 'BEGIN { v = int(n * s + 0.5); print (v < 1 ? 1 : v) }'; }
# The fakes' argv lines holding TEXT, of the program TEXT starts with.
argv_lines() { grep -F -- "$1" "$S/argv.log" | grep "^${1%% *} "; }
# The word after FLAG in a line.
arg_after() { awk -v f="$2" '{ for (i = 1; i < NF; i++) if ($i == f) { print $(i + 1); exit } }' <<< "$1"; }
# The timeout run_timed gave the command in LOG whose line holds TEXT.
timeout_in() { grep '^\$ ' "$1" | grep -F -- "$2" | sed -n 's/.*(timeout \([0-9]*\) s)$/\1/p' | head -1; }

only_the_tarball_in_out() { [ "$(ls -A "$S/out")" = "gpu_check_call$1.tar.gz" ]; }
# Every command run_timed ran had a timeout of at least 1 s.
every_timeout_at_least_1() {
  local n
  while read -r n; do [ "$n" -ge 1 ] || return 1; done < <(sed -n 's/^[$] .*(timeout \([0-9]*\) s)$/\1/p' "$WORK"/*.txt)
}
no_step_ran() { ! grep -qvE '^nvidia-smi|^python3 -c ' "$S/argv.log"; }
pid_gone() { local p; p="$(cat "$1")" && ! grep -q "sleep" "/proc/$p/cmdline" 2>/dev/null; }
# The gtest filter's excluded patterns (after its '-'), colon-separated and ':'-bracketed.
excluded_of() { local f=${1#--gtest_filter=}; echo ":${f#*-}:"; }
included_of() { local f=${1#--gtest_filter=}; echo ":${f%%-*}"; }

# ---------------------------------------------------------------------------------------------
# The scenarios.

call2_healthy() {
  new_scenario call2_healthy
  run_call 2
  expect "exit 0" [ "$RC" -eq 0 ]
  expect "the tarball is the only file in \$OUT" only_the_tarball_in_out 2
  local step limit
  while read -r step limit; do
    expect "$step PASS in summary.txt" status_is "$step" PASS
    [ "$step" = preflight ] || expect "$step's log in the tarball" [ -s "$WORK/$step.txt" ]
  done < <(plan_of 2)
  expect "every timeout at least 1 s" every_timeout_at_least_1

  # The sanitizers' filters: racecheck leaves cuDNN's tests out, memcheck runs them.
  local mem race
  mem="$(argv_lines 'compute-sanitizer --tool memcheck' | grep -o -- '--gtest_filter=[^ ]*')"
  race="$(argv_lines 'compute-sanitizer --tool racecheck' | grep -o -- '--gtest_filter=[^ ]*')"
  expect "racecheck's filter excludes Cudnn* ($race)" eval '[[ "$(excluded_of "$race")" == *":Cudnn*:"* ]]'
  expect "memcheck's filter includes Cudnn* and does not exclude it ($mem)" \
    eval '[[ "$(included_of "$mem")" == *":Cudnn*"* && "$(excluded_of "$mem")" != *":Cudnn*:"* ]]'
  expect "both filters exclude the whole-model tests" \
    eval '[[ "$(excluded_of "$mem")" == *":CudaModel*:"* && "$(excluded_of "$race")" == *":CudaModel*:"* ]]'

  # gpt-4.7b: the budget from max_batch_4.7b's own probe, the batch from its adacc row.
  local memory4 compare4 budget=$((FREE_AT_PROBE_MIB - 1024))MiB
  memory4="$(argv_lines 'adacc memory' | grep 'gpt-4.7b.toml')"
  compare4="$(argv_lines 'adacc compare' | grep 'gpt-4.7b.toml')"
  expect "adacc memory of gpt-4.7b got --memory-budget $budget" [ "$(arg_after "$memory4" --memory-budget)" = "$budget" ]
  expect "adacc compare of gpt-4.7b got --batch $ADACC_BATCH_4_7B" [ "$(arg_after "$compare4" --batch)" = "$ADACC_BATCH_4_7B" ]
  expect "adacc compare of gpt-4.7b got --memory-budget $budget" [ "$(arg_after "$compare4" --memory-budget)" = "$budget" ]

  # The shard: written once, under /tmp and outside $OUT, whole when the steps read it, gone after.
  local writes shard
  writes="$(argv_lines 'python3 ' | grep -c 'random_token_shard.py')"
  shard="$(awk '{print $3}' "$S/state/shards.txt" | sort -u)"
  expect "the shard written once ($writes)" [ "$writes" -eq 1 ]
  expect "the shard under /tmp, not in \$OUT ($shard)" eval '[[ "$shard" == /tmp/* && "$shard" != "$S/out"/* ]]'
  expect "compare_345m, memory_345m and adacc_4.7b read it whole ($SHARD_BYTES bytes)" \
    [ "$(awk -v s="$shard" -v b="$SHARD_BYTES" '$3 == s && $4 == b' "$S/state/shards.txt" | wc -l)" -eq 3 ]
  expect "the shard not in the tarball" eval '! tar -tzf "$S/out/gpu_check_call2.tar.gz" | grep -q random_tokens'
  expect "the call's /tmp folder removed at its end" [ ! -e "$(dirname "$shard")" ]
}

call1_healthy() {
  new_scenario call1_healthy
  run_call 1
  expect "exit 0" [ "$RC" -eq 0 ]
  expect "the tarball is the only file in \$OUT" only_the_tarball_in_out 1
  local step
  for step in preflight device_tests bench_gpu per_op_table; do expect "$step PASS" status_is "$step" PASS; done
  expect "hf_gpt2 SKIP without torch" eval 'status_is hf_gpt2 SKIP && note_has hf_gpt2 "this step needs torch, transformers and numpy"'
  expect "torch_peer SKIP without torch" eval 'status_is torch_peer SKIP && note_has torch_peer "torch_peer: skipped"'
  expect "bench_gpu.json and per_op_table.json in the tarball" eval '[ -s "$WORK/bench_gpu.json" ] && [ -s "$WORK/per_op_table.json" ]'
  expect "the per-op tables in modes none and quant" eval '[ -n "$(argv_lines "bench_gpu --per-op --per-op-modes none,quant")" ]'
  expect "device_tests.json in the tarball" [ -s "$WORK/device_tests.json" ]
  expect "every timeout at least 1 s" every_timeout_at_least_1
}

# The shard writer takes 2 s and a little (E s, as the fake measured it): compare_345m, the first step
# that writes it, runs adacc with its limit less the whole seconds bash's SECONDS saw pass, which are
# floor(E) or one more (the two readings of SECONDS can straddle one more second boundary), and a
# second more for the few commands around the writer; memory_345m finds the shard and gets its whole
# limit.
shard_time_given_back() {
  new_scenario shard_time_given_back
  local scale=0.5
  run_call 2 GPU_CHECK_TIME_SCALE=$scale GPU_CHECK_STEPS=compare_345m,memory_345m FAKE_SHARD_SLEEP=2
  expect "exit 0" [ "$RC" -eq 0 ]
  local compare_limit memory_limit got e least most
  compare_limit="$(scaled_ref "$(plan_of 2 | awk '$1 == "compare_345m" {print $2}')" "$scale")"
  memory_limit="$(scaled_ref "$(plan_of 2 | awk '$1 == "memory_345m" {print $2}')" "$scale")"
  got="$(timeout_in "$WORK/compare_345m.txt" 'adacc compare')"
  e="$(cat "$S/state/shard_seconds" 2>/dev/null)"
  least="$(awk -v e="${e:-0}" 'BEGIN { print int(e) }')" most="$(awk -v e="${e:-0}" 'BEGIN { print int(e) + 2 }')"
  expect "compare_345m's adacc got $compare_limit s less $least to $most s for the shard's ${e:-?} s (got ${got:-none})" \
    eval '[ -n "$got" ] && [ -n "$e" ] && [ "$least" -ge 2 ] && [ "$got" -le $((compare_limit - least)) ] && [ "$got" -ge $((compare_limit - most)) ]'
  got="$(timeout_in "$WORK/memory_345m.txt" 'adacc train')"
  expect "memory_345m's adacc got its whole $memory_limit s (got ${got:-none})" [ "${got:-0}" = "$memory_limit" ]
  expect "memory_345m did not write the shard again" eval '! grep -q random_token_shard "$WORK/memory_345m.txt"'
}

# The shard writer writes 4 KiB and hangs: killed at its timeout, compare_345m fails saying so, and
# memory_345m writes the shard again rather than train on the stub.
shard_killed() {
  new_scenario shard_killed
  run_call 2 GPU_CHECK_TIME_SCALE=0.2 GPU_CHECK_STEPS=compare_345m,memory_345m FAKE_HANG=random_token_shard
  expect "exit 1" [ "$RC" -eq 1 ]
  expect "compare_345m FAIL: the shard failed" eval 'status_is compare_345m FAIL && note_has compare_345m "writing the random token shard failed"'
  expect "compare_345m ran no adacc" eval '! grep -q "^compare " "$S/state/shards.txt" 2>/dev/null'
  expect "memory_345m PASS" status_is memory_345m PASS
  expect "memory_345m trained on a whole shard" \
    [ "$(awk -v b="$SHARD_BYTES" '$1 == "train" && $4 == b' "$S/state/shards.txt" 2>/dev/null | wc -l)" -eq 1 ]
  expect "the hung shard writer killed" pid_gone "$S/state/hung.random_token_shard.pid"
}

# memcheck's program ignores TERM (only timeout's KILL, 5 s later, ends it); max_batch_345m's adacc
# hangs but ends at TERM. Both TIMEOUT within their limit and the 5 s, the steps between and after
# run, and the call exits 1 within what its plan promises.
hung_steps() {
  new_scenario hung_steps
  local scale=0.02 steps=memcheck,racecheck,max_batch_345m,max_batch_4.7b
  run_call 2 GPU_CHECK_TIME_SCALE=$scale GPU_CHECK_STEPS=$steps \
    FAKE_HANG_STUBBORN=sanitizer-memcheck FAKE_HANG=adacc-memory-gpt-345m
  expect "exit 1" [ "$RC" -eq 1 ]
  local step limit secs bound=0
  for step in memcheck max_batch_345m; do
    limit="$(step_line "$step" | awk '{print $6}')" secs="$(step_line "$step" | awk '{print $3}')"
    expect "$step TIMEOUT" eval 'status_is "$step" TIMEOUT && note_has "$step" "killed at its timeout"'
    # A second for SECONDS' whole seconds, one for a loaded machine.
    expect "$step ended within its $limit s and 5 s to die (took ${secs:-?} s)" [ "${secs:-999}" -le $((limit + 5 + 2)) ]
  done
  expect "racecheck, after the hang, PASS" status_is racecheck PASS
  expect "max_batch_4.7b, after the hang, PASS" status_is max_batch_4.7b PASS
  expect "the stubborn hang killed" pid_gone "$S/state/hung.sanitizer-memcheck.pid"
  expect "the plain hang killed" pid_gone "$S/state/hung.adacc-memory-gpt-345m.pid"
  while read -r step limit; do
    [[ ",preflight,$steps," == *",$step,"* ]] && bound=$((bound + $(scaled_ref "$limit" $scale) + 5))
  done < <(plan_of 2)
  expect "the call took at most its steps' timeouts and 5 s each ($CALL_S of $bound s)" [ "$CALL_S" -le "$bound" ]
}

# GPU_CHECK_BUDGET_S=40 at the real timescale: each step's timeout cut to what is left less the 15 s
# kept for the end (25 s), saying so where it was longer; with 20 s, nothing is left for any step.
budget() {
  new_scenario budget
  run_call 2 GPU_CHECK_TIME_SCALE=1 GPU_CHECK_BUDGET_S=40
  expect "exit 0" [ "$RC" -eq 0 ]
  local step planned limit
  while read -r step planned; do
    [ "$step" = preflight ] && continue
    limit="$(step_line "$step" | awk '{print $6}')"
    expect "$step PASS within 25 s (limit ${limit:-none})" eval 'status_is "$step" PASS && [ "${limit:-99}" -le 25 ]'
    if [ "$planned" -gt 25 ]; then expect "$step's note says its timeout was cut" note_has "$step" "by GPU_CHECK_BUDGET_S"; fi
  done < <(plan_of 2)
  new_scenario budget_spent
  run_call 2 GPU_CHECK_TIME_SCALE=1 GPU_CHECK_BUDGET_S=20
  expect "exit 0" [ "$RC" -eq 0 ]
  expect "every step after the preflight SKIP: no time left" \
    [ "$(grep -c 'no time left in GPU_CHECK_BUDGET_S=20' "$SUMMARY")" -eq $(($(plan_of 2 | wc -l) - 1)) ]
  expect "no step ran" no_step_ran
}

no_gpu() {
  new_scenario no_gpu
  run_call 2 FAKE_NO_GPU=1
  expect "exit 2" [ "$RC" -eq 2 ]
  expect "preflight FAIL: no visible GPU" eval 'status_is preflight FAIL && note_has preflight "no visible GPU"'
  expect "the tarball is the only file in \$OUT" only_the_tarball_in_out 2
  expect "no step ran" no_step_ran
  expect "the reason printed" grep -q "couldn't communicate with the NVIDIA driver" "$S/stdout"
}

# bin/adacc a real executable linked against a library that is then deleted. Needs a C compiler
# (cc), which a machine that builds this project has.
missing_library() {
  new_scenario missing_library
  if ! command -v cc > /dev/null; then
    echo "  skipped: no C compiler (cc) to build an executable whose library is missing"
    return
  fi
  local lib=libgpu_check_harness_gone.so.1
  mkdir -p "$S/elf"
  echo 'int gone(void) { return 0; }' > "$S/elf/gone.c"
  echo 'int gone(void); int main(void) { return gone(); }' > "$S/elf/main.c"
  if ! cc -shared -fPIC -Wl,-soname,$lib -o "$S/elf/$lib" "$S/elf/gone.c" ||
     ! cc -o "$S/bundle/bin/adacc" "$S/elf/main.c" "$S/elf/$lib"; then
    fail "cc could not build the executable"
    return
  fi
  rm "$S/elf/$lib"
  run_call 2
  expect "exit 3" [ "$RC" -eq 3 ]
  expect "preflight FAIL naming bin/adacc and $lib" eval 'status_is preflight FAIL && note_has preflight "bin/adacc needs $lib: not found"'
  expect "stdout names it" grep -qF "bin/adacc needs $lib: not found" "$S/stdout"
  expect "the tarball is the only file in \$OUT" only_the_tarball_in_out 2
  expect "no step ran" no_step_ran
}

no_usable_device() {
  new_scenario no_usable_device
  run_call 1 GPU_CHECK_STEPS=device_tests,bench_gpu,per_op_table FAKE_NO_DEVICE=1
  expect "exit 1" [ "$RC" -eq 1 ]
  expect "device_tests FAIL: saw no usable GPU" eval 'status_is device_tests FAIL && note_has device_tests "saw no usable GPU"'
  expect "bench_gpu and per_op_table PASS" eval 'status_is bench_gpu PASS && status_is per_op_table PASS'
  expect "hf_gpt2 and torch_peer SKIP: not in GPU_CHECK_STEPS" \
    eval 'note_has hf_gpt2 "not in GPU_CHECK_STEPS" && note_has torch_peer "not in GPU_CHECK_STEPS"'
  expect "python3 ran no torch script" eval '! grep -qE "hf_gpt2_check|torch_reference" "$S/argv.log"'
}

# Call 3 with the stand-in llm.c: adacc and the three llm.c variants at each preset, llm.c's depth from
# the preset's shape, the fastest variant (-ge 2: 95 ms, 689,853 tokens/s) in the speed ratio, then
# llm.c's largest-batch estimate beside adacc memory's batches in the GPU's memory llm.c printed.
call3_llmc() {
  new_scenario call3_llmc
  run_call 3 LLMC_TRAIN_GPT2CU="$T/train_gpt2cu"
  expect "exit 0" [ "$RC" -eq 0 ]
  expect "llmc_peer PASS" status_is llmc_peer PASS
  expect "the tarball is the only file in \$OUT" only_the_tarball_in_out 3
  expect "llm.c ran d12 and d24 at batch 64 x 1024, three variants each" \
    eval '[ "$(argv_lines "train_gpt2cu " | grep -c -- "-e d12 -b 64 -t 1024")" -eq 3 ] &&
          [ "$(argv_lines "train_gpt2cu " | grep -c -- "-e d24 -b 64 -t 1024")" -eq 3 ]'
  expect "the summary gives adacc / llm.c against the faster variant" \
    grep -qF "llmc_peer gpt-117m B=64 T=1024: adacc 504123 tokens/s, llm.c 689853 tokens/s (-r 0 -ge 2), adacc / llm.c = 0.731" "$SUMMARY"
  expect "llm.c's median of the 10 steps after 3, and its memory" grep -qF "llm.c -r 0: 100.0 ms/step (median of 10), 655360 tokens/s; device memory in use before its first step 61234 MiB; its estimate of its largest batch 155" "$SUMMARY"
  expect "the largest batches: llm.c's estimate beside adacc memory's in the GPU's memory" \
    grep -qF "llmc_peer gpt-117m T=1024, largest batch in the GPU's 143771 MiB: llm.c 155 (its own estimate, -r 0); adacc none 33, full 244, quant 84, adacc 244 (exact accounting); adacc's largest (full) / llm.c's = 1.57" "$SUMMARY"
  expect "adacc memory asked for the GPU's memory" eval '[ "$(argv_lines "adacc memory" | grep -c -- "--memory-budget 143771MiB")" -eq 2 ]'
  expect "adacc's accounted memory" grep -qF "adacc: 130.00 ms/step (median of 10), 504123 tokens/s; accounted memory 24576 MiB" "$SUMMARY"
}

call3_without_llmc() {
  new_scenario call3_without_llmc
  run_call 3
  expect "exit 0" [ "$RC" -eq 0 ]
  expect "llmc_peer SKIP naming LLMC_TRAIN_GPT2CU" eval 'status_is llmc_peer SKIP && note_has llmc_peer "LLMC_TRAIN_GPT2CU"'
}

call2_healthy
call1_healthy
call3_llmc
call3_without_llmc
shard_time_given_back
shard_killed
hung_steps
budget
no_gpu
missing_library
no_usable_device

echo
if [ "${#FAILURES[@]}" -gt 0 ]; then
  echo "gpu_check_harness: ${#FAILURES[@]} check(s) failed:"
  printf '  %s\n' "${FAILURES[@]}"
  exit 1
fi
echo "gpu_check_harness: every check passed"
