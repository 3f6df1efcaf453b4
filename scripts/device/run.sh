#!/usr/bin/env bash
# Runs on the device machine (the GPU), from the repository root, over what scripts/device/bundle.sh
# put in .device/: unpacks Node, Dawn and the Vulkan loader, then runs the named parts in order, each
# under a timeout that also respects a deadline for the whole script, so a slow part cannot eat the
# call. Logs go to $OUT (at most 8 files come back): env.log, matmul.log, tests.log, kernels.log,
# model.log, grpo.log, grpo-metrics.jsonl, rollout.log. Parts (default: all, in this order):
#   env      nvidia-smi, what Dawn sees (scripts/device/probe.ts), PyTorch's fp32 matmul and copy
#   probe    env without PyTorch
#   matmul   bench/matmul.ts at 1024³–8192³, ours (every variant) vs tf.matMul on the same device
#   tests    tests/gpu through the vitest shim (every kernel variant the runtime can pick there)
#   kernels  bench/kernels.ts (0.5B-shaped decoder layer vs the tfjs twin), bench/attention.ts
#   model    bench/model.ts (train step, decode at batch 1/8/32), bench/lora-step.ts (GRPO updates)
#   grpo     two GRPO steps of the bundled qwen-tiny through the trainer CLI, seconds per phase
#   rollout  bench/rollout.ts: one 32 x 8 rollout step of qwen-tiny, 1, 4, 8 and 16 decode steps per readback
#   learn    the learning runs of docs/results.md: the RL runs of LEARN_RUNS side by side from the
#            bundled qwen-tiny (the more-worlds warm start) or WARM_START, or from an SFT run first when
#            SFT_CONFIG names one, each with an equal share of the GPU's memory; then every last
#            checkpoint on the held-out questions (learn.log,
#            runs.tar.xz, ckpt-*.tar.xz: at most 8 files come back)
# Env: DEADLINE_S (default 540): seconds after which no part starts and running ones are cut.
#   learn: WARM_START (a checkpoint folder; default public/models/qwen-tiny), or SFT_CONFIG with
#   SFT_MODEL (its start, default the config's model.path), SFT_STEPS (306), SFT_MINUTES (3);
#   LEARN_RUNS (config names), EVAL_RESERVE_S (100: kept for the replay and the packing),
#   LEARN_QUESTIONS (400: questions of the replay), LEARN_REPLAY (last, or all: every checkpoint);
#   LEARN_PACK (policy: each run's last weights, two runs a file; or full: with the optimizer state and
#   the critic, one run a file, what --resume needs); LEARN_RESUME (a carried folder of run folders, as
#   runs.tar.xz and a full ckpt-*.tar.xz unpack: a run of LEARN_RUNS found there continues with
#   --resume from its last checkpoint, same optimizer state and step, WARM_START again its KL reference).
#   bash scripts/device/run.sh [part ...]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
start=$(date +%s)
deadline=$((start + ${DEADLINE_S:-540}))
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(env matmul tests kernels model grpo rollout)

# --- unpack (seconds) ---
# The Vulkan loader and GLVND, as the device tool's README says (unpacked over /, every run).
for f in .device/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
bin=/tmp/device-bin
mkdir -p "$bin"
[[ -x $bin/node ]] || { xz -dc .device/node.xz >"$bin/node" && chmod +x "$bin/node"; }
dawn=.device/js/node_modules/webgpu/dist/linux-x64
[[ -f $dawn/dawn.node ]] || xz -dc "$dawn/dawn.node.xz" >"$dawn/dawn.node"
export PATH=$bin:$PATH
# NVIDIA's Vulkan ICD lives outside the loader's default folders on these machines.
nv_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [[ -f $nv_icd ]] && ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
  export VK_DRIVER_FILES=$nv_icd
fi
export AGENT_R1_ADAPTER=${AGENT_R1_ADAPTER:-gpu} # a local dry run may set lavapipe
js=.device/js

# run_part NAME LOG SECONDS command...: runs under min(SECONDS, time to the deadline), logs, reports.
run_part() {
  local name=$1 log=$2 secs=$3
  shift 3
  local left=$((deadline - $(date +%s)))
  if ((left < 15)); then
    echo "== $name: skipped (deadline)" | tee -a "$OUT/$log"
    return
  fi
  ((secs > left)) && secs=$left
  echo "== $name (limit ${secs}s)" | tee -a "$OUT/$log"
  local t0=$(date +%s)
  timeout -k 5 "$secs" "$@" 2>&1 | grep -v '^Warning: maxDynamic' >>"$OUT/$log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: rc $rc, $(($(date +%s) - t0)) s" | tee -a "$OUT/$log"
  return "$rc"
}

for part in "${parts[@]}"; do
  case $part in
  env | probe)
    { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; node -v; uname -r; } >>"$OUT/env.log" 2>&1
    { ls -l /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/nvidia/share/vulkan/icd.d; cat $nv_icd; ldconfig -p | grep -iE 'vulkan|GLX|GLdispatch'; ldd /usr/local/nvidia/lib64/libGLX_nvidia.so.0 | grep -i 'not found'; } >>"$OUT/env.log" 2>&1
    # If Dawn finds no GPU, try the NVIDIA ICD explicitly, then with the driver's library folder.
    if ! run_part probe env.log 60 node $js/scripts/device/probe.js; then
      export VK_DRIVER_FILES=$nv_icd
      export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
      if ! run_part probe-nvidia-icd env.log 60 node $js/scripts/device/probe.js; then
        export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}
        run_part probe-nvidia-lib env.log 60 node $js/scripts/device/probe.js
      fi
    fi
    [[ $part == env ]] && run_part torch env.log 90 python3 scripts/device/torch_matmul.py
    ;;
  matmul)
    BENCH_SIZES=1024,2048,4096,8192 BENCH_MIN_MS=100 BENCH_DECODE=1 run_part matmul matmul.log 150 node $js/bench/matmul.js
    ;;
  tests)
    run_part gpu-tests tests.log 200 node $js/scripts/device/gpu-tests.js
    ;;
  kernels)
    BENCH_LAYER_T=512 BENCH_T=128,512,2048 run_part kernels kernels.log 120 node $js/bench/kernels.js
    BENCH_T=512,2048,8192 run_part attention kernels.log 90 node $js/bench/attention.js
    BENCH_T=512,2048,8192 BENCH_DKV=rows run_part attention-rows kernels.log 90 node $js/bench/attention.js
    ;;
  model)
    BENCH_05B_TRAIN=4,512 BENCH_05B_DECODE_STEPS=32 run_part model model.log 120 node $js/bench/model.js
    run_part lora-05b-r16 model.log 90 node $js/bench/lora-step.js --shape 05b --rank 16 --reps 2
    run_part lora-05b-full model.log 90 node $js/bench/lora-step.js --shape 05b --rank 0 --reps 2
    run_part lora-tiny-full model.log 60 node $js/bench/lora-step.js --shape tiny --rank 0 --reps 2
    ;;
  grpo)
    rm -rf /tmp/grpo-tiny
    run_part grpo-tiny grpo.log 150 node $js/scripts/train.js --config configs/grpo-worlds-filter.json \
      --model public/models/qwen-tiny --out /tmp/grpo-tiny --steps 2 --minutes 0
    cp /tmp/grpo-tiny/metrics.jsonl "$OUT/grpo-metrics.jsonl" 2>/dev/null
    ;;
  rollout)
    run_part rollout rollout.log 240 node $js/bench/rollout.js --config configs/grpo-worlds-filter-32x8.json \
      --model public/models/qwen-tiny --reps 1 --readback-steps 1,4,8,16
    ;;
  learn)
    # One Node process per RL run, all at once: at qwen-tiny's size a step is bound by dispatch and
    # read-back latency, not by the GPU's arithmetic, so processes overlap. Each run stops through
    # --minutes (between steps), so it still ends with its evaluation and checkpoint before the
    # deadline; the timeout behind it is only a backstop.
    runs=/tmp/runs
    rm -rf $runs /tmp/ckpt-*.tar && mkdir -p $runs
    if [[ -z ${SFT_CONFIG:-} ]]; then
      warm=${WARM_START:-public/models/qwen-tiny} # the bundled warm start, or a carried checkpoint
    else
      run_part sft learn.log $((${SFT_MINUTES:-3} * 60 + 60)) node $js/scripts/train.js \
        --config "$SFT_CONFIG" ${SFT_MODEL:+--model "$SFT_MODEL"} --out $runs/sft \
        --steps "${SFT_STEPS:-306}" --minutes "${SFT_MINUTES:-3}"
      warm=$(ls -d $runs/sft/checkpoints/step-* 2>/dev/null | tail -n 1)
    fi
    if [[ -z $warm ]]; then
      echo "== learn: the SFT left no checkpoint, no RL" | tee -a "$OUT/learn.log"
    else
      learn_runs=(${LEARN_RUNS:-ppo-worlds-32x8-warmup ppo-worlds-32x8-warmup-no-adv-mask ppo-worlds-32x8-warmup-seed2 ppo-worlds-32x8-warmup-no-adv-mask-seed2 reinforce-pp-worlds-32x8-filter-no-loss-mask grpo-worlds-filter-32x8-no-loss-mask})
      # The runs share one GPU, and each process's memory planner sees the whole of it: each gets an
      # equal share of 85 % of the GPU's memory (--memory-budget), so an update that would not fit
      # beside the others is split into micro-batches instead of failing.
      share=""
      gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1)
      [[ $gpu_mib =~ ^[0-9]+$ ]] && share=$((gpu_mib * 85 / 100 / ${#learn_runs[@]}))
      left=$((deadline - $(date +%s) - ${EVAL_RESERVE_S:-100}))
      # 45 s for the step under way when the budget runs out and the run's last evaluation.
      minutes=$(awk "BEGIN { m = ($left - 45) / 60; print (m > 0.05 ? m : 0.05) }")
      echo "== learn: ${#learn_runs[@]} runs from $warm, --minutes $minutes, ${share:-no} MiB each (limit ${left}s)" | tee -a "$OUT/learn.log"
      t0=$(date +%s)
      for cfg in "${learn_runs[@]}"; do
        resume=""
        if [[ -n ${LEARN_RESUME:-} && -d $LEARN_RESUME/$cfg/checkpoints ]]; then
          # The carried checkpoints are not replayed again (.carried lists them).
          cp -r "$LEARN_RESUME/$cfg" "$runs/$cfg" && resume=--resume
          (cd "$runs/$cfg/checkpoints" && ls -d step-*) >"$runs/$cfg/.carried"
          echo "== learn: $cfg resumes from $(tail -n 1 "$runs/$cfg/.carried")" | tee -a "$OUT/learn.log"
        fi
        timeout -k 5 "$left" node $js/scripts/train.js --config "configs/$cfg.json" --model "$warm" \
          --out "$runs/$cfg" $resume --minutes "$minutes" ${share:+--memory-budget "$share"} 2>&1 | grep -v '^Warning: maxDynamic' >"$runs/$cfg.log" &
      done
      wait
      echo "== learn: RL runs done, $(($(date +%s) - t0)) s" | tee -a "$OUT/learn.log"
      for cfg in sft "${learn_runs[@]}"; do
        echo "--- $cfg: $(grep -c '"step"' "$runs/$cfg/metrics.jsonl" 2>/dev/null) metric lines" >>"$OUT/learn.log"
        tail -n 3 "$runs/$cfg.log" >>"$OUT/learn.log" 2>/dev/null
      done
      # Every run's last checkpoint on the held-out questions, with run A's config as every 400-question
      # table of docs/results.md (greedy: the config's sampling settings do not enter).
      left=$((deadline - $(date +%s) - 20))
      t0=$(date +%s)
      # LEARN_REPLAY=all replays every checkpoint of a run (the curve), oldest last so that a cut
      # deadline loses the middle of a curve, not its end; the default replays the last one only.
      for cfg in sft "${learn_runs[@]}"; do
        ckpts=$(ls -d "$runs/$cfg"/checkpoints/step-* 2>/dev/null | sort -r)
        [[ ${LEARN_REPLAY:-last} == all ]] || ckpts=$(head -n 1 <<<"$ckpts")
        for ckpt in $ckpts; do
          step=$(basename "$ckpt")
          grep -qx "$step" "$runs/$cfg/.carried" 2>/dev/null && continue
          timeout -k 5 "$left" node $js/scripts/train.js --config configs/grpo-pointer-noise-t05.json --evaluate-only \
            --model "$ckpt" --questions "${LEARN_QUESTIONS:-400}" --json "$runs/$cfg/replay-$step.json" 2>&1 |
            grep -v '^Warning: maxDynamic' >"$runs/$cfg/replay-$step.log" &
        done
      done
      wait
      echo "== learn: replays done, $(($(date +%s) - t0)) s" | tee -a "$OUT/learn.log"
      for log in "$runs"/*/replay-*.log; do
        [[ -f $log ]] || continue
        echo "--- ${log#$runs/} replay: $(grep -E 'EM' "$log" | head -n 3 | tr '\n' ' ')" >>"$OUT/learn.log"
      done
    fi
    # Pack: everything but the checkpoints in one file; each run's last policy weights, two runs a file
    # (about 10 MB: float32 weights hardly compress; no optimizer state, no critic), or with
    # LEARN_PACK=full each run's whole last checkpoint, one run a file (qwen-tiny's policy and AdamW
    # moments are 14.5 MB, 4.4 MB compressed after a few steps of configs/micro.json; a PPO run adds a
    # critic and its moments).
    (cd $runs && tar -cJf "$OUT/runs.tar.xz" --exclude=checkpoints .)
    per_file=2
    excludes=(--exclude='*optimizer.safetensors' --exclude=critic.safetensors)
    if [[ ${LEARN_PACK:-policy} == full ]]; then
      per_file=1
      excludes=()
    fi
    i=0
    for d in $(ls -d $runs/*/ 2>/dev/null); do
      last=$(ls -d "$d"checkpoints/step-* 2>/dev/null | tail -n 1)
      [[ -n $last ]] || continue
      (cd $runs && tar -rf "/tmp/ckpt-$((i / per_file)).tar" ${excludes[@]+"${excludes[@]}"} "${last#$runs/}")
      i=$((i + 1))
    done
    for t in /tmp/ckpt-*.tar; do [[ -f $t ]] && xz -T0 -3 -c "$t" >"$OUT/$(basename "$t").xz" && rm "$t"; done
    ls -l "$OUT" >>"$OUT/learn.log"
    ;;
  *) echo "unknown part: $part" ;;
  esac
done

# The tail of the reply: each log's table rows and result lines.
echo
echo "===== summary ($(($(date +%s) - start)) s)"
for f in "$OUT"/*.log; do
  echo "--- $(basename "$f")"
  grep -E '^(\||==|---|adapter|features|f16|limits|copy|torch|[0-9]+ files|FAILED|WARNING|train:|step|eval)' "$f" | tail -n 40
done
