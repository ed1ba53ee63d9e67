#!/usr/bin/env bash
# The GPU check: what only a GPU can tell, in two device calls that each end within 8 minutes, on a
# machine with one NVIDIA GPU, its driver and the CUDA toolkit (no Debian packages, no network).
#   call 1  the CUDA tests on the device (test_cuda_device: every kernel against its CPU twin, the
#           whole-model training steps against the CPU backend, recompute bit-identity,
#           checkpoints); bench_gpu (gpt-117m and gpt-345m at T=1024: step ms, tokens/s, MFU, then
#           the fixed memory modes at one batch); the per-op table (bench_gpu --per-op);
#           Hugging Face GPT-2 export and import against transformers (scripts/hf_gpt2_check.py,
#           on the CPU: this machine's python3 has torch and transformers); adacc's PyTorch peer
#           (scripts/torch_reference.py, on the GPU): gpt-117m's loss and gradients on one batch,
#           adacc fp32 and bf16 against torch, then gpt-117m and gpt-345m at T=1024, batch 16,
#           tokens/s of adacc and of torch (bf16 autocast, SDPA, torch.compile) and their ratio.
#   call 2  compute-sanitizer memcheck and racecheck on the kernel tests; the largest batch per mode
#           by exact accounting (adacc memory); the planned modes training at gpt-345m (adacc compare:
#           none, full, quant, recompute-opt, adacc; R = (t_full - t_adacc) / (t_full - t_none));
#           gpt-4.7b adacc at its largest batch in this GPU's free memory for 2 steps.
#   call 3  (when device time is left) adacc beside llm.c (scripts/bench_llmc.py): gpt-117m and
#           gpt-345m at T=1024, batch 64, tokens/s of adacc and of llm.c's train_gpt2cu, which this
#           project neither ships nor builds: LLMC_TRAIN_GPT2CU names one built by hand; without
#           it, the step is a skip.
# Before anything runs, a preflight: nvidia-smi, the GPU machine's own cuBLASLt and cuDNN found and
# put on LD_LIBRARY_PATH, and `ldd` of every executable, so a missing library stops the call within
# seconds rather than failing every step. Each step runs as a child under its own `timeout`: a hung
# step is killed and reported, and the call goes on. The timeouts of a call add up to at most 480 s.
#
# Usage: gpu_check.sh 1 | 2 | 3 | --plan
#   --plan prints each call's steps with their timeouts and the sum, and exits 1 if a sum is over
#   480 s (no GPU needed). Run from a bundle (bash scripts/gpu_bundle.sh DIR on a CPU machine, then
#   bash DIR/gpu_check.sh 1 and 2) or from a checkout whose build/ has the CUDA targets.
# Results: ONE file, $OUT/gpu_check_call<N>.tar.gz ($OUT is the device tool's folder; gpu_check_out/
#   when unset), holding every step's output and summary.txt. It is rewritten after every step, so a
#   call cut short still brings back what had run. The summary is printed at the end too.
# Exit: 0 every step passed or was skipped; 1 a step failed or timed out; 2 a usage error, or no
#   visible GPU; 3 a shared library the executables need was not found.
# Environment:
#   GPU_CHECK_BUDGET_S    seconds this call may take in all (the device time left, when that is less
#                         than 8 minutes): each step's timeout is cut to what is left, later steps skipped
#   GPU_CHECK_STEPS       only these steps of the call, by name, comma-separated (the preflight always
#                         runs): to run again what failed; adacc_4.7b takes its batch from max_batch_4.7b
#   GPU_CHECK_TIME_SCALE  multiplies every timeout (default 1): for testing this script with fake
#                         executables on a machine without a GPU (tests/scripts/gpu_check_harness.sh)
#   CUDA_HOME             the CUDA toolkit (default: the one nvcc on PATH is in, else /usr/local/cuda)
#   LLMC_TRAIN_GPT2CU     call 3: llm.c's train_gpt2cu, built with cuDNN (README, "llm.c beside adacc")
# The step functions are called by name (step_$NAME), which shellcheck cannot follow:
# shellcheck disable=SC2317
set -uo pipefail

# ---------------------------------------------------------------------------------------------
# The plan: each call's steps in the order they run, NAME:SECONDS (the step's timeout). The device
# tool allows 10 minutes a command and 15 minutes in all, a machine start included, so each call
# gets 8 minutes; every step may also take 5 s to die after its timeout (timeout -k 5), which the
# device call's timeout_s (540) leaves room for.
MAX_CALL_S=480
# Call 1's first H200 run: device_tests took 4 s, bench_gpu 18 s, hf_gpt2 26 s; per_op_table skipped.
# The third took 147 s in all. device_tests has cuDNN graphs to build since (a handle and graphs per
# test context, non-deterministic backwards too), and a timeout loses every result (its JSON is
# written at the end), so it takes 40 s of torch_peer's, whose budget follows its timeout (73 s
# used on the third run); bench_gpu 10 s more of it for its eighth run.
PLAN_1="preflight:15 device_tests:100 bench_gpu:85 per_op_table:110 hf_gpt2:40 torch_peer:130"
PLAN_2="preflight:15 memcheck:75 racecheck:75 max_batch_345m:20 max_batch_4.7b:40 compare_345m:115 memory_345m:20 adacc_4.7b:120"
PLAN_3="preflight:15 llmc_peer:400"

plan_of() { case "$1" in 1) echo "$PLAN_1" ;; 2) echo "$PLAN_2" ;; 3) echo "$PLAN_3" ;; esac; }

print_plan() {
  local call entry total over=0
  for call in 1 2 3; do
    total=0
    echo "call $call (bash gpu_check.sh $call):"
    for entry in $(plan_of "$call"); do
      printf '  %-16s %4d s\n' "${entry%%:*}" "${entry##*:}"
      total=$((total + ${entry##*:}))
    done
    if [ "$total" -le "$MAX_CALL_S" ]; then
      printf '  %-16s %4d s (at most %d)\n' sum "$total" "$MAX_CALL_S"
    else
      printf '  %-16s %4d s: OVER the %d s a call may take\n' sum "$total" "$MAX_CALL_S"
      over=1
    fi
  done
  echo "(each step may take 5 s more to exit after its timeout: give each device call timeout_s 540)"
  return "$over"
}

usage() {
  echo "usage: gpu_check.sh 1 | 2 | 3 | --plan" >&2
  echo "  1       preflight, CUDA tests on the device, bench_gpu, per-op table, Hugging Face GPT-2 vs transformers," >&2
  echo "          adacc vs its PyTorch peer (gradients, tokens/s)" >&2
  echo "  2       preflight, compute-sanitizer memcheck + racecheck, largest batches, planned modes at gpt-345m, gpt-4.7b adacc" >&2
  echo "  3       preflight, adacc vs llm.c's train_gpt2cu (tokens/s; LLMC_TRAIN_GPT2CU names it)" >&2
  echo "  --plan  each call's step timeouts and their sum; exit 1 if a call's sum is over $MAX_CALL_S s" >&2
  exit 2
}

[ $# -eq 1 ] || usage
case "$1" in
  1 | 2 | 3) CALL=$1 ;;
  --plan) print_plan; exit $? ;;
  *) usage ;;
esac

# GPU_CHECK_STEPS names steps of this call only: a misspelt one would skip everything and pass.
if [ -n "${GPU_CHECK_STEPS:-}" ]; then
  for wanted in ${GPU_CHECK_STEPS//,/ }; do
    if [[ " $(plan_of "$CALL" | sed 's/:[0-9]*//g') " != *" $wanted "* ]]; then
      echo "gpu_check: GPU_CHECK_STEPS names '$wanted', which is not a step of call $CALL;" \
        "its steps: $(plan_of "$CALL" | sed 's/:[0-9]*//g')" >&2
      exit 2
    fi
  done
fi

# ---------------------------------------------------------------------------------------------
# Where things are.
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ -x "$HERE/bin/test_cuda_device" ]; then  # a bundle (scripts/gpu_bundle.sh)
  BIN="$HERE/bin" BUNDLE_LIB="$HERE/lib" CONFIGS="$HERE/configs"
  COMMIT="$(cat "$HERE/COMMIT" 2>/dev/null || echo unknown)"
else                                          # a checkout built here
  BIN="$HERE/../build" BUNDLE_LIB="" CONFIGS="$HERE/../configs"
  COMMIT="$(git -C "$HERE" rev-parse HEAD 2>/dev/null || echo unknown)"
fi
if [ -z "${CUDA_HOME:-}" ]; then
  if command -v nvcc >/dev/null; then CUDA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
  else CUDA_HOME=/usr/local/cuda; fi
fi
# python3 runs with the library path it came with: the preflight puts the bundle's libstdc++ & co
# ahead of everything for adacc, which torch must not be made to load.
PYTHON_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
# Call 3's llm.c executable, when given and executable (its libraries are checked with adacc's).
LLMC=""
[ "$CALL" = 3 ] && [ -n "${LLMC_TRAIN_GPT2CU:-}" ] && [ -x "$LLMC_TRAIN_GPT2CU" ] &&
  LLMC="$(cd "$(dirname "$LLMC_TRAIN_GPT2CU")" && pwd)/$(basename "$LLMC_TRAIN_GPT2CU")"
RESULTS="${OUT:-gpu_check_out}"
mkdir -p "$RESULTS" && RESULTS="$(cd "$RESULTS" && pwd)"
TARBALL="$RESULTS/gpu_check_call$CALL.tar.gz"
# Everything is written under /tmp and only the tarball goes to $OUT (the device tool brings back at
# most 8 files). The random token shard stays out of the tarball: 2 MiB nobody needs back.
TMP_ROOT="$(mktemp -d /tmp/gpu_check.XXXXXX)"
WORK="$TMP_ROOT/gpu_check_call$CALL"
SHARD="$TMP_ROOT/random_tokens.bin"
mkdir -p "$WORK"
trap 'rm -rf "$TMP_ROOT"' EXIT
: > "$WORK/steps.txt"
: > "$WORK/highlights.txt"

TIME_SCALE="${GPU_CHECK_TIME_SCALE:-1}"
DEADLINE=""
if [ -n "${GPU_CHECK_BUDGET_S:-}" ]; then
  [[ "$GPU_CHECK_BUDGET_S" =~ ^[0-9]+$ ]] || { echo "gpu_check: GPU_CHECK_BUDGET_S must be whole seconds" >&2; exit 2; }
  DEADLINE=$((SECONDS + GPU_CHECK_BUDGET_S))
fi
# Line-buffered output where stdbuf exists, so a step killed by its timeout leaves what it printed.
LINEBUF=()
command -v stdbuf >/dev/null && LINEBUF=(stdbuf -oL -eL)
# What a run that found no usable GPU prints (test_cuda_device skips, bench_gpu measures nothing and
# exits 0, adacc --device cuda stops): such a step fails, whatever its exit status.
NO_DEVICE='no CUDA device|no NVIDIA driver found|run on a machine with an NVIDIA GPU|CUDA driver version is insufficient|no CUDA-capable device'

# ---------------------------------------------------------------------------------------------
# Helpers.

# A timeout scaled by GPU_CHECK_TIME_SCALE, whole seconds, at least 1.
scaled() { awk -v n="$1" -v s="$TIME_SCALE" 'BEGIN { v = int(n * s + 0.5); print (v < 1 ? 1 : v) }'; }
# What is left of LIMIT after USED seconds of it (at least 1).
rest() { local r=$(($1 - $2)); [ "$r" -ge 1 ] && echo "$r" || echo 1; }

# run_timed LOG LIMIT CMD...: CMD as a child under its own timeout (TERM after LIMIT s to its whole
# process group, KILL 5 s later: a hung kernel cannot eat the call); output appended to LOG; sets RC.
run_timed() {
  local log=$1 limit=$2
  shift 2
  printf '$ %s (timeout %s s)\n' "${*//$'\n'/ }" "$limit" >> "$log"  # one line, even for python3 -c
  timeout -k 5 "$limit" "$@" >> "$log" 2>&1 < /dev/null
  RC=$?
}

# judge LOG: a step's STATUS and NOTE from RC and what LOG shows. Only ever makes a step worse.
judge() {
  local log=$1 line
  if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
    STATUS=TIMEOUT NOTE="${NOTE:+$NOTE; }killed at its timeout (what it printed is in $(basename "$log"))"
  elif line="$(grep -m1 -E "$NO_DEVICE" "$log")"; then
    STATUS=FAIL NOTE="${NOTE:+$NOTE; }saw no usable GPU: ${line:0:160}"
  elif [ "$RC" -ne 0 ]; then
    STATUS=FAIL NOTE="${NOTE:+$NOTE; }exit $RC: $(last_line "$log")"
  fi
}

last_line() { grep -v '^[[:space:]]*$' "$1" | tail -1 | cut -c1-160; }
# A log without the command lines run_timed writes.
body() { grep -v '^\$ ' "$1"; }
# Key lines for summary.txt (and stdout), under the step's name.
highlight() { [ -n "$2" ] && printf -- '-- %s\n%s\n\n' "$1" "$2" >> "$WORK/highlights.txt"; }
record() { printf '%-7s %-15s %5s s of %4s  %s\n' "$2" "$1" "$3" "$4" "$5" >> "$WORK/steps.txt"; }

# summary.txt and the tarball, rewritten after every step. Arg: the exit code, or "" while running.
write_results() {
  local code=$1
  count() { grep -c "^$1 " "$WORK/steps.txt"; }
  {
    echo "gpu_check call $CALL, commit $COMMIT, $(date -u '+%F %T UTC'), on $(hostname 2>/dev/null || echo '?')"
    echo "GPU: ${GPU_DESC:-not seen}"
    [ -n "${LIB_DESC:-}" ] && echo "libraries: $LIB_DESC"
    printf '%-7s %-15s %12s  %s\n' status step "time / limit" note
    cat "$WORK/steps.txt"
    printf 'call %s: %d passed, %d failed, %d timed out, %d skipped' "$CALL" \
      "$(count PASS)" "$(count FAIL)" "$(count TIMEOUT)" "$(count SKIP)"
    if [ -n "$code" ]; then echo " (exit $code)"; else echo " (still running)"; fi
    echo "every step's output: $(basename "$TARBALL")"
    echo
    cat "$WORK/highlights.txt"
  } > "$WORK/summary.txt"
  tar -C "$TMP_ROOT" -czf "$TARBALL.part" "gpu_check_call$CALL" && mv -f "$TARBALL.part" "$TARBALL"
}

# Ends the call: the results written, the summary printed. Arg: the exit code (default: 1 if a step
# failed or timed out, else 0).
finish() {
  local code=${1:-}
  if [ -z "$code" ]; then
    code=0
    grep -qE '^(FAIL|TIMEOUT) ' "$WORK/steps.txt" && code=1
  fi
  write_results "$code"
  echo
  cat "$WORK/summary.txt"
  exit "$code"
}

# ---------------------------------------------------------------------------------------------
# Preflight (15 s): runs in this shell, since it sets LD_LIBRARY_PATH for every step; each command in
# it has its own timeout: 6 s for nvidia-smi's query (a driver waking up can take seconds), 3 s for
# its full table, 3 s for python3, 1 s for each of the three executables' ldd.

no_gpu() {
  echo "gpu_check: no NVIDIA GPU visible here ($1): nothing to check" | tee -a "$WORK/preflight.txt"
  record preflight FAIL $((SECONDS - PREFLIGHT_T0)) "$PREFLIGHT_LIMIT" "no visible GPU: $1"
  finish 2
}

check_gpu() {
  local log=$1 query rc
  command -v nvidia-smi >/dev/null || no_gpu "nvidia-smi not found on PATH"
  query="$(timeout -k 1 "$(scaled 6)" nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,memory.free \
    --format=csv,noheader,nounits 2>&1)"
  rc=$?
  printf '$ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,memory.free\n%s\n' "$query" >> "$log"
  [ "$rc" -eq 124 ] && query="timed out"
  if [ "$rc" -ne 0 ] || [ -z "$query" ]; then no_gpu "nvidia-smi: $(head -1 <<< "${query:-no output}") (exit $rc)"; fi
  timeout -k 1 "$(scaled 3)" nvidia-smi >> "$log" 2>&1  # the full table, for the record
  IFS=',' read -r GPU_NAME GPU_DRIVER GPU_TOTAL_MIB GPU_USED_MIB GPU_FREE_MIB <<< "$(head -1 <<< "$query")"
  GPU_NAME="${GPU_NAME#"${GPU_NAME%%[![:space:]]*}"}"  # leading blanks off
  GPU_DRIVER="${GPU_DRIVER// /}" GPU_TOTAL_MIB="${GPU_TOTAL_MIB// /}" GPU_USED_MIB="${GPU_USED_MIB// /}"
  GPU_FREE_MIB="${GPU_FREE_MIB// /}"
  [[ "$GPU_FREE_MIB" =~ ^[0-9]+$ ]] || GPU_FREE_MIB=""
  GPU_DESC="$GPU_NAME, driver $GPU_DRIVER, ${GPU_TOTAL_MIB} MiB (${GPU_USED_MIB} MiB used)"
  [ "$(grep -c . <<< "$query")" -gt 1 ] && GPU_DESC+="; $(grep -c . <<< "$query") GPUs, the first is used"
  [ -n "${CUDA_VISIBLE_DEVICES+set}" ] && GPU_DESC+="; CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
  # The executables carry CUDA 13's runtime (static), which needs driver 580 or later.
  [[ "$GPU_DRIVER" =~ ^([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -lt 580 ] &&
    GPU_DESC+="; WARNING: CUDA 13 needs driver >= 580"
  echo "GPU: $GPU_DESC"
}

# pip's nvidia-* wheels (torch's cuBLAS, cuDNN, NCCL, ...) put their libraries in
# site-packages/nvidia/<name>/lib: every such folder, from the nvidia namespace package and from
# every entry of sys.path.
WHEEL_DIRS_PY='
import glob, os, sys
roots = []
try:
    import nvidia
    roots += list(getattr(nvidia, "__path__", []))
except Exception:
    pass
roots += [os.path.join(p, "nvidia") for p in sys.path if p]
seen = []
for root in roots:
    for d in sorted(glob.glob(os.path.join(root, "*", "lib"))):
        d = os.path.realpath(d)
        if os.path.isdir(d) and d not in seen:
            seen.append(d)
for d in seen:
    print(d)
'

# First folder of SEARCHED holding a file matching the glob $1.
dir_holding() {
  local d f
  for d in "${SEARCHED[@]}"; do
    for f in "$d"/$1; do [ -e "$f" ] && { echo "$d"; return 0; }; done
  done
  return 1
}

add_library_dir() {
  case ":${LD_LIBRARY_PATH:-}:" in *":$1:"*) ;; *) export LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
}

# cuBLASLt (libcublasLt.so.13, which the CUDA backend opens when it starts), cuDNN (for
# model.attention = "cudnn", once it is built) and NCCL (opened at run time; without it the
# collectives go through host memory) are the GPU machine's own, not the bundle's: from its CUDA
# toolkit, else from pip's nvidia-* wheels.
find_gpu_libraries() {
  local log=$1 lib dir wheel_dirs=() desc=()
  SEARCHED=()
  local d
  for d in "$CUDA_HOME/lib64" "$CUDA_HOME/targets/x86_64-linux/lib"; do [ -d "$d" ] && SEARCHED+=("$d"); done
  if command -v python3 >/dev/null; then
    mapfile -t wheel_dirs < <(timeout -k 1 "$(scaled 3)" python3 -c "$WHEEL_DIRS_PY" 2>> "$log" | grep .)
    [ "${#wheel_dirs[@]}" -gt 0 ] || desc+=("no nvidia-* wheels in python3's sys.path")
  else
    desc+=("no python3: pip's nvidia-* wheels not searched")
  fi
  SEARCHED+=("${wheel_dirs[@]}")
  { echo "CUDA_HOME=$CUDA_HOME"; echo "library folders searched:"; printf '  %s\n' "${SEARCHED[@]}"; } >> "$log"
  # Last added goes first on LD_LIBRARY_PATH: the bundle's lib/ (libstdc++ & co) ahead of all.
  for lib in 'libnccl.so.2' 'libcudnn*.so.9' 'libcublasLt.so.13'; do
    if dir="$(dir_holding "$lib")"; then
      add_library_dir "$dir"
      desc=("${lib/\*/} in $dir" "${desc[@]}")
    else
      desc=("${lib/\*/} not in the toolkit or the wheels" "${desc[@]}")
    fi
  done
  [ -n "$BUNDLE_LIB" ] && add_library_dir "$BUNDLE_LIB"
  LIB_DESC="$(printf '%s; ' "${desc[@]}")" LIB_DESC="${LIB_DESC%; }"
  echo "libraries: $LIB_DESC" | tee -a "$log"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >> "$log"
}

# `ldd` of every executable: a library it lacks stops the call here (exit 3), naming the library,
# the executable and where it was looked for. One found in a searched folder is added, and ldd rerun.
check_executables() {
  local log=$1 exe out lib dir pass added t missing=() exes=()
  t="$(scaled 1)"
  if [ -n "$BUNDLE_LIB" ]; then
    for exe in "$BIN"/*; do [ -f "$exe" ] && [ -x "$exe" ] && exes+=("$exe"); done
  else
    exes=("$BIN/adacc" "$BIN/bench_gpu" "$BIN/test_cuda_device")
  fi
  for exe in "${exes[@]}"; do [ -x "$exe" ] || missing+=("$exe"); done
  [ "${#exes[@]}" -gt 0 ] || missing+=("$BIN/*")
  [ -n "$LLMC" ] && exes+=("$LLMC")
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "gpu_check: preflight: not built: ${missing[*]} (the CUDA targets adacc, bench_gpu, test_cuda_device;" \
      "or run from a bundle: bash scripts/gpu_bundle.sh)" | tee -a "$log"
    record preflight FAIL $((SECONDS - PREFLIGHT_T0)) "$PREFLIGHT_LIMIT" "not built: ${missing[*]}"
    finish 3
  fi
  for pass in 1 2; do
    missing=() added=0
    for exe in "${exes[@]}"; do
      if command -v ldd >/dev/null; then out="$(timeout -k 1 "$t" ldd "$exe" 2>&1)"
      else out="$(LD_TRACE_LOADED_OBJECTS=1 timeout -k 1 "$t" "$exe" 2>&1)"; fi  # what ldd does
      printf '$ ldd %s\n%s\n' "$exe" "$out" >> "$log"
      while read -r lib; do
        if [ "$pass" -eq 1 ] && dir="$(dir_holding "$lib")"; then
          add_library_dir "$dir"
          added=1
          [[ "$LIB_DESC" == *"$lib in "* ]] || LIB_DESC+="; $lib in $dir (for ${exe##*/})"
          continue
        fi
        missing+=("${exe#"$HERE"/} needs $lib: not found")
      done < <(awk '/=> not found/ {print $1}' <<< "$out")
    done
    [ "$added" -eq 1 ] || break  # nothing added: what is missing stays missing
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >> "$log"
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  {
    echo "gpu_check: preflight: a shared library is missing, so no step runs:"
    printf '  %s\n' "${missing[@]}"
    echo "  looked on LD_LIBRARY_PATH=$LD_LIBRARY_PATH,"
    echo "  in the CUDA toolkit's and pip's nvidia-* wheels' folders: ${SEARCHED[*]:-none found},"
    echo "  and in ld.so's default paths (/etc/ld.so.cache, /lib, /usr/lib)."
    echo "  cuBLASLt (libcublasLt.so.13) comes with the CUDA 13 toolkit (CUDA_HOME=$CUDA_HOME) or pip's"
    echo "  nvidia-cublas wheel, cuDNN (libcudnn*.so.9) with cuDNN 9 or nvidia-cudnn; anything else belongs in"
    echo "  the bundle's lib/ (scripts/gpu_bundle.sh)."
  } | tee -a "$log"
  local note
  note="$(printf '%s; ' "${missing[@]}")"
  record preflight FAIL $((SECONDS - PREFLIGHT_T0)) "$PREFLIGHT_LIMIT" "${note%; }"
  finish 3
}

# The backend opens libcublasLt.so.13 at run time, so ldd does not see it: it must be in a folder
# on LD_LIBRARY_PATH (find_gpu_libraries adds the one it found) or in ld.so's cache.
check_cublaslt() {
  local log=$1 d
  local IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do [ -e "$d/libcublasLt.so.13" ] && return 0; done
  unset IFS
  ldconfig -p 2>/dev/null | grep -q 'libcublasLt\.so\.13 ' && return 0
  echo "gpu_check: preflight: libcublasLt.so.13 is neither on LD_LIBRARY_PATH nor in ld.so's cache, so no" \
    "step runs: install the CUDA 13 toolkit's cuBLAS (CUDA_HOME=$CUDA_HOME) or pip's nvidia-cublas wheel" | tee -a "$log"
  record preflight FAIL $((SECONDS - PREFLIGHT_T0)) "$PREFLIGHT_LIMIT" "libcublasLt.so.13 not found"
  finish 3
}

find_sanitizer() {
  local c
  command -v compute-sanitizer && return 0
  for c in "$CUDA_HOME/bin/compute-sanitizer" "$CUDA_HOME/compute-sanitizer/compute-sanitizer"; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

preflight() {
  local log="$WORK/preflight.txt"
  PREFLIGHT_LIMIT=$1 PREFLIGHT_T0=$SECONDS
  echo "== preflight (timeout ${PREFLIGHT_LIMIT} s in all, $(date +%T))"
  { echo "commit $COMMIT, binaries in $BIN"; uname -a; echo "$(nproc) CPUs"; } >> "$log"
  [ -f "$CUDA_HOME/version.json" ] && grep -m1 -A2 '"cuda"' "$CUDA_HOME/version.json" >> "$log"
  check_gpu "$log"
  find_gpu_libraries "$log"
  check_executables "$log"
  check_cublaslt "$log"
  SANITIZER="$(find_sanitizer)"
  echo "compute-sanitizer: ${SANITIZER:-not found}" >> "$log"
  record preflight PASS $((SECONDS - PREFLIGHT_T0)) "$PREFLIGHT_LIMIT" "executables' libraries all found"
  echo "   PASS ($((SECONDS - PREFLIGHT_T0)) s)"
  write_results ""
}

# ---------------------------------------------------------------------------------------------
# The steps: step_NAME LIMIT runs within LIMIT seconds (its commands' timeouts add up to it) and sets
# STATUS (PASS, FAIL, TIMEOUT or SKIP) and NOTE.

gtest_lines() { grep -E '^\[==========\] .* ran|^\[ +(PASSED|FAILED|SKIPPED) +\]' "$1" | head -"$2"; }

step_device_tests() {
  local log="$WORK/device_tests.txt"
  run_timed "$log" "$1" "${LINEBUF[@]}" "$BIN/test_cuda_device" --gtest_color=no \
    --gtest_output="json:$WORK/device_tests.json"
  judge "$log"
  if [ "$STATUS" = PASS ] && ! grep -qE '^\[  PASSED  \] [1-9]' "$log"; then STATUS=FAIL NOTE="no test passed"; fi
  highlight device_tests "$(gtest_lines "$log" 25)"
}

# The kernel tests only. The whole-model tests (CudaModel, CudaAdacc's profiler and training runs,
# CudaDataParallel) take racecheck minutes: on the first H200 run it spent 19 s on the profiler test
# alone and was killed in the next. CudaNccl goes too: NCCL's own start-up probes kernels with
# cudaFuncGetAttributes, which memcheck reports as 8 API errors that are not ours. cuDNN's attention
# tests (Cudnn*) are in: their buffers are ours, whoever's kernels write them.
KERNEL_TESTS='Cuda*:Cudnn*:-CudaModel*:CudaKernelCoverage*:CudaAdacc*:CudaDataParallel*:CudaNccl*'
# racecheck leaves cuDNN's tests out: on an H200 it reported 84 hazards, every one inside cuDNN's
# generated sm90 flash kernels (TMA and wgmma, synchronised by mbarriers that racecheck's shared-
# memory tracking does not follow), none in ours; memcheck still covers cuDNN's calls.
RACECHECK_TESTS="$KERNEL_TESTS:Cudnn*"

sanitize() {  # TOOL LIMIT FILTER
  local tool=$1 limit=$2 filter=$3 log="$WORK/$1.txt" line
  if [ -z "$SANITIZER" ]; then
    STATUS=SKIP NOTE="compute-sanitizer not found (PATH, $CUDA_HOME/bin, $CUDA_HOME/compute-sanitizer)"
    return
  fi
  run_timed "$log" "$limit" "$SANITIZER" --tool "$tool" --error-exitcode 9 "$BIN/test_cuda_device" \
    --gtest_filter="$filter" --gtest_color=no
  if line="$(grep -m1 -i 'device not supported' "$log")"; then
    STATUS=SKIP NOTE="compute-sanitizer: ${line:0:120}"
    return
  fi
  judge "$log"
  [ "$RC" -eq 9 ] && NOTE="compute-sanitizer $tool found errors: $(grep -m1 'ERROR SUMMARY' "$log")"
  if [ "$STATUS" = PASS ] && ! grep -qE '^\[  PASSED  \] [1-9]' "$log"; then STATUS=FAIL NOTE="no test passed"; fi
  highlight "$tool" "$(grep -m1 'ERROR SUMMARY' "$log"; gtest_lines "$log" 12)"
}
step_memcheck() { sanitize memcheck "$1" "$KERNEL_TESTS"; }
step_racecheck() { sanitize racecheck "$1" "$RACECHECK_TESTS"; }

# Each preset at the largest power-of-two batch that fits, gpt-117m again with cuDNN's other
# attention backward (training.deterministic = false) and with a 4x longer classifier chunk (the
# auto one splits its batch), then the four fixed modes at gpt-117m's batch: eight runs of 1
# warm-up + 5 measured steps (their median, fastest and slowest), 48 steps of 0.5-0.7 s each on an
# H200 (the third run's), with room for slow kernels and the runs' setup within 85 s. Five, not
# three: on the third run the same gpt-117m step measured 474.5 ms in the first table and 488.8 in
# the second, 3% apart where the MFU target was 0.1% away. With cuDNN's attention, the engine's
# default on CUDA in bf16 (it passed its device tests on an H200). The per-op tables keep 1 + 3
# steps (four tables within their 110 s).
# shellcheck disable=SC2054  # the commas are bench_gpu's list syntax
BENCH_ARGS=(--presets gpt-117m,gpt-345m --seq 1024 --attention cudnn)
STEP_TABLE_STEPS=(--steps 5 --warmup 1)
PER_OP_STEPS=(--steps 3 --warmup 1)

step_bench_gpu() {
  local log="$WORK/bench_gpu.txt"
  run_timed "$log" "$1" "${LINEBUF[@]}" "$BIN/bench_gpu" "${BENCH_ARGS[@]}" "${STEP_TABLE_STEPS[@]}" \
    --json "$WORK/bench_gpu.json"
  judge "$log"
  if [ "$STATUS" = PASS ] && grep -q 'does not fit even at batch 1' "$log"; then
    STATUS=FAIL NOTE="$(grep -m1 'does not fit even at batch 1' "$log")"
  fi
  highlight bench_gpu "$(body "$log" | head -20)"
}

# Where each preset's step goes (bench_gpu --per-op): ms per step per op family beside its FLOPs,
# bytes and roofline fraction, then per kernel, from CUDA events around every kernel; in mode none,
# then in mode quant, whose codec kernels then show their time (four tables of 1 + 3 steps).
step_per_op_table() {
  local log="$WORK/per_op_table.txt"
  run_timed "$log" "$1" "${LINEBUF[@]}" "$BIN/bench_gpu" --per-op --per-op-modes none,quant "${BENCH_ARGS[@]}" \
    "${PER_OP_STEPS[@]}" --json "$WORK/per_op_table.json"
  judge "$log"
  highlight per_op_table "$(body "$log" | head -90)"
}

# adacc's Hugging Face GPT-2 folders against transformers' GPT2LMHeadModel: an exported tiny model
# loads with no missing or unexpected key and gives adacc's losses, and a save_pretrained one starts
# adacc from transformers' losses (within 1e-4). About 10-20 s, mostly importing torch.
step_hf_gpt2() {
  local log="$WORK/hf_gpt2.txt"
  run_timed "$log" "$1" env LD_LIBRARY_PATH="$PYTHON_LIBRARY_PATH" "${LINEBUF[@]}" python3 "$HERE/hf_gpt2_check.py" \
    --adacc "$BIN/adacc" --adacc-library-path "${LD_LIBRARY_PATH:-}" --work "$TMP_ROOT/hf_gpt2"
  if grep -q 'this step needs torch, transformers and numpy' "$log"; then
    STATUS=SKIP NOTE="$(grep -m1 'this step needs' "$log" | cut -c1-120)"
    return
  fi
  judge "$log"
  highlight hf_gpt2 "$(grep -E '^hf_gpt2' "$log")"
}

# adacc against its PyTorch peer, torch on the GPU (the machine's python3 has torch): adacc's
# `gradients` of gpt-117m at B=4, T=1024 (--device cuda, fp32 and bf16) against torch's fp32 (TF32
# off) and bf16 autocast, each tensor's relative L2 within the tolerances torch_reference.py
# derives, and a swapped tensor caught; then gpt-117m and gpt-345m at T=1024, batch 16: adacc
# (compare --modes none, bf16) and torch (bf16 autocast, SDPA, torch.compile per block, fused
# AdamW), 5 timed steps after 2 warm-up (torch's first compiles, counted in its warm-up, not its
# tokens/s), tokens/s side by side and adacc / torch. The script skips a preset with less than
# 60 s left of --budget-s; what ran is printed as it goes. On an H200 (torch 2.11) the step took
# 73 s, torch's warm-up with compile 12.7 s at gpt-117m and 6.3 s at gpt-345m.
step_torch_peer() {
  local log="$WORK/torch_peer.txt"
  run_timed "$log" "$1" env LD_LIBRARY_PATH="$PYTHON_LIBRARY_PATH" "${LINEBUF[@]}" python3 "$HERE/torch_reference.py" \
    check --device cuda --speed --speed-presets gpt-117m,gpt-345m --speed-batch 16 --seq 1024 \
    --adacc "$BIN/adacc" --adacc-library-path "${LD_LIBRARY_PATH:-}" --work "$TMP_ROOT/torch_peer" \
    --budget-s "$(rest "$1" 10)"
  if grep -q '^torch_peer: skipped' "$log"; then
    STATUS=SKIP NOTE="$(grep -m1 '^torch_peer: skipped' "$log" | cut -c1-120)"
    return
  fi
  judge "$log"
  highlight torch_peer "$(grep -E '^torch_peer ' "$log" | grep -v 'per tensor:$')"
}

# adacc beside llm.c (scripts/bench_llmc.py): gpt-117m and gpt-345m at T=1024, batch 64, adacc
# (compare --modes none, bf16, cuDNN attention) and llm.c's train_gpt2cu ("-r 0"; "-r 0 -ge 2": GELU
# in cuBLASLt's epilogues; "-r 2": its most frugal), 10 timed steps after 3, tokens/s side by side
# and adacc / llm.c; then the largest batch of each in the GPU's memory (llm.c's own estimate,
# adacc memory's by mode). llm.c gets the preflight's library path (its cuBLASLt and cuDNN are the
# machine's, as adacc's).
step_llmc_peer() {
  local log="$WORK/llmc_peer.txt"
  if [ -z "${LLMC_TRAIN_GPT2CU:-}" ]; then
    STATUS=SKIP NOTE="LLMC_TRAIN_GPT2CU names no llm.c train_gpt2cu (README, llm.c beside adacc)"
    return
  fi
  if [ -z "$LLMC" ]; then
    STATUS=FAIL NOTE="LLMC_TRAIN_GPT2CU=$LLMC_TRAIN_GPT2CU is not an executable"
    return
  fi
  run_timed "$log" "$1" env LD_LIBRARY_PATH="$PYTHON_LIBRARY_PATH" "${LINEBUF[@]}" python3 "$HERE/bench_llmc.py" \
    --llmc "$LLMC" --llmc-library-path "${LD_LIBRARY_PATH:-}" --adacc "$BIN/adacc" \
    --adacc-library-path "${LD_LIBRARY_PATH:-}" --work "$TMP_ROOT/llmc_peer" --presets gpt-117m,gpt-345m \
    --batch 64 --seq 1024 --steps 10 --warmup 3 --budget-s "$(rest "$1" 10)"
  judge "$log"
  highlight llmc_peer "$(grep -E '^llmc_peer ' "$log")"
}

# The largest batch per mode by exact accounting. The accounting is the same on any machine (README's
# table was computed on a CPU) and the planned modes profile on this machine's CPU, so two runs only:
# gpt-345m in 32 GiB (the Adacc paper's V100-32GB setting), a check of the bundle against README's
# row, and gpt-4.7b in this GPU's free memory, which only this machine can say and whose adacc batch
# the last step trains, with the attention that run trains with (ATTENTION_4_7B).
memory_rows() { grep -E '^(mode|none|full|selective|quant|adacc|recompute-opt) ' "$1"; }

step_max_batch_345m() {
  local log="$WORK/max_batch_345m.txt"
  run_timed "$log" "$1" "${LINEBUF[@]}" "$BIN/adacc" memory --config "$CONFIGS/gpt-345m.toml" --device cuda \
    --set training.seq_len=1024 --set model.attention=fused --modes none,full,selective,quant,adacc,recompute-opt \
    --memory-budget 32GiB
  judge "$log"
  highlight max_batch_345m "$(memory_rows "$log")
(README, by the same accounting on a CPU: none 32, full 244, selective 32, quant 83, adacc 244, recompute-opt 244)"
}

# gpt-4.7b's attention: cuDNN's, which passed its device tests on an H200 and ran gpt-4.7b adacc at
# batch 32 in 2.2 s a step. Not `fused`: the scalar fused kernel made the first H200 run's 2 steps at
# batch 146 outlast their 110 s. cuDNN's backward workspace (2 B H T^2 bytes and a little: 6.2 GiB at
# batch 133) is counted in the planned total (kernels/cuda/device_sizes.h).
ATTENTION_4_7B=cudnn

# recompute-opt is left out at 4.7b: its largest batch is adacc's (both full's, README), and each
# planned mode costs a planner search on the CPU.
step_max_batch_4_7b() {
  local log="$WORK/max_batch_4.7b.txt" probe free
  probe="$(scaled 3)"
  run_timed "$log" "$probe" nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits
  free="$(body "$log" | grep -m1 -E '^ *[0-9]+ *$' | tr -d ' ')"
  free="${free:-$GPU_FREE_MIB}"
  if [ -z "$free" ]; then STATUS=FAIL NOTE="nvidia-smi gave no free memory"; return; fi
  # The CUDA context and cuDNN's workspace are counted; the GiB is for what is not (cuDNN's handle
  # and kernels: about 20 MiB at gpt-345m on an H200).
  BUDGET_4_7B_MIB=$((free - 1024))
  run_timed "$log" "$(rest "$1" "$probe")" "${LINEBUF[@]}" "$BIN/adacc" memory --config "$CONFIGS/gpt-4.7b.toml" \
    --device cuda --set training.seq_len=1024 --set "model.attention=$ATTENTION_4_7B" --modes none,full,selective,quant,adacc \
    --memory-budget "${BUDGET_4_7B_MIB}MiB"
  judge "$log"
  BATCH_4_7B="$(awk '$1 == "adacc" && $NF ~ /^[0-9]+$/ {print $NF}' "$log" | tail -1)"
  NOTE="${NOTE:+$NOTE; }budget ${BUDGET_4_7B_MIB} MiB (free memory less 1 GiB): adacc's largest batch ${BATCH_4_7B:-not found}"
  highlight max_batch_4.7b "$(memory_rows "$log")"
}

# Training on random tokens: speed does not depend on the text. llm.c's token shard format
# (data/token_shard.h), written by random_token_shard.py (beside this script, in the bundle too)
# once per call, under /tmp.
DATA_SETS=(--set "data.train=$SHARD" --set data.val= --set training.grad_accum=1 --set training.seq_len=1024)

# Writes the shard unless an earlier step did; SHARD_S: the seconds that took (0: it was there), which
# the step's own command then does not get.
write_shard() {  # LOG LIMIT
  local t0=$SECONDS
  SHARD_S=0
  [ -s "$SHARD" ] && return 0
  if ! command -v python3 >/dev/null; then STATUS=FAIL NOTE="no python3 to write the random token shard"; return 1; fi
  # Written beside it and renamed once whole: a writer killed at its timeout must not leave a
  # partial file that the next step's -s test takes for the shard.
  run_timed "$1" "$2" python3 "$HERE/random_token_shard.py" "$SHARD.part" $((1 << 20)) 1337
  SHARD_S=$((SECONDS - t0))
  [ "$RC" -eq 0 ] && mv -f "$SHARD.part" "$SHARD" && return 0
  rm -f "$SHARD.part"
  STATUS=FAIL NOTE="writing the random token shard failed (exit $RC)"
  return 1
}

# gpt-345m at T=1024, batch 32 (twice what none holds in 32 GiB): none (unbudgeted, the reference),
# full, quant, recompute-opt and adacc under 32 GiB; 4 steps each, the first left out of the median.
step_compare_345m() {
  local log="$WORK/compare_345m.txt"
  write_shard "$log" "$(scaled 10)" || return
  run_timed "$log" "$(rest "$1" "$SHARD_S")" "${LINEBUF[@]}" "$BIN/adacc" compare --config "$CONFIGS/gpt-345m.toml" \
    --device cuda "${DATA_SETS[@]}" --modes none,full,quant,recompute-opt,adacc --batch 32 --steps 4 --warmup 1 \
    --memory-budget 32GiB
  judge "$log"
  highlight compare_345m "$(body "$log" | grep -vE '^compare: ' | head -16)"
}

# Memory as promised on the GPU: gpt-345m trained 3 steps at batch 16 (mode none), printing the
# CUDA context's overhead measured at start-up and, at the end, the accounted total beside the
# device's memory in use (cudaMemGetInfo); their difference is what the accounting does not count.
step_memory_345m() {
  local log="$WORK/memory_345m.txt"
  write_shard "$log" "$(scaled 10)" || return
  run_timed "$log" "$(rest "$1" "$SHARD_S")" "${LINEBUF[@]}" "$BIN/adacc" train --config "$CONFIGS/gpt-345m.toml" \
    --device cuda "${DATA_SETS[@]}" --set training.batch_size=16 --set training.steps=3 --set memory.mode=none \
    --set checkpoint.every=0 --set "logging.run_dir=$TMP_ROOT/memory_345m"
  judge "$log"
  highlight memory_345m "$(grep -E '^memory( \(|: )|the CUDA context' "$log")"
}

# gpt-4.7b, adacc at the largest batch max_batch_4.7b found, 2 steps (the second timed; no fidelity:
# none's reference gradients would not fit), with ATTENTION_4_7B.
step_adacc_4_7b() {
  local log="$WORK/adacc_4.7b.txt" batch="${BATCH_4_7B:-}" budget="${BUDGET_4_7B_MIB:-}"
  write_shard "$log" "$(scaled 10)" || return
  if [ -z "$budget" ]; then
    [ -n "$GPU_FREE_MIB" ] || { STATUS=FAIL NOTE="no free memory figure for the budget"; return; }
    budget=$((GPU_FREE_MIB - 1024))
  fi
  if [ "$batch" = 0 ]; then STATUS=FAIL NOTE="no adacc batch of gpt-4.7b fits ${budget} MiB"; return; fi
  if [ -z "$batch" ]; then batch=32 NOTE="no batch from max_batch_4.7b: batch 32"; fi
  run_timed "$log" "$(rest "$1" "$SHARD_S")" "${LINEBUF[@]}" "$BIN/adacc" compare --config "$CONFIGS/gpt-4.7b.toml" \
    --device cuda "${DATA_SETS[@]}" --set "model.attention=$ATTENTION_4_7B" --modes adacc --batch "$batch" --steps 2 --warmup 1 \
    --memory-budget "${budget}MiB" --no-fidelity
  judge "$log"
  NOTE="${NOTE:+$NOTE; }batch $batch in ${budget} MiB, $ATTENTION_4_7B attention"
  highlight adacc_4.7b "$(body "$log" | grep -vE '^compare: ' | head -8)"
}

# ---------------------------------------------------------------------------------------------
# The call: the preflight, then each step of the plan, each under its timeout (cut to what is left of
# GPU_CHECK_BUDGET_S, which also keeps 15 s for the last kill and the tarball).
run_plan() {
  local entry name limit left t0
  for entry in $(plan_of "$CALL"); do
    name=${entry%%:*}
    limit="$(scaled "${entry##*:}")"
    [ "$name" = preflight ] && continue  # ran first
    if [ -n "${GPU_CHECK_STEPS:-}" ] && [[ ",$GPU_CHECK_STEPS," != *",$name,"* ]]; then
      record "$name" SKIP 0 "$limit" "not in GPU_CHECK_STEPS"
      continue
    fi
    STATUS=PASS NOTE="" RC=0
    if [ -n "$DEADLINE" ]; then
      left=$((DEADLINE - SECONDS - 15))
      if [ "$left" -lt 10 ]; then
        record "$name" SKIP 0 "$limit" "no time left in GPU_CHECK_BUDGET_S=$GPU_CHECK_BUDGET_S"
        continue
      fi
      [ "$left" -lt "$limit" ] && limit=$left NOTE="timeout cut to $left s by GPU_CHECK_BUDGET_S"
    fi
    echo "== $name (timeout ${limit} s, $(date +%T))"
    t0=$SECONDS
    "step_${name//./_}" "$limit"
    record "$name" "$STATUS" $((SECONDS - t0)) "$limit" "$NOTE"
    echo "   $STATUS ($((SECONDS - t0)) s)${NOTE:+: $NOTE}"
    write_results ""
  done
}

echo "gpu_check call $CALL: $(plan_of "$CALL"); results in $TARBALL"
preflight "$(scaled 15)"
run_plan
finish
