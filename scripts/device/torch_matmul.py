"""PyTorch's fp32 matmul and device-to-device copy on the device machine's GPU: the ceilings the
WebGPU figures of scripts/device/run.sh are compared with. fp32 means full fp32 (TF32 off);
TF32 is printed beside it for reference only. Timed with CUDA events, median of 10 after warm-up."""
import torch

assert torch.cuda.is_available(), "no CUDA device"
dev = torch.device("cuda")
props = torch.cuda.get_device_properties(dev)
print(f"torch {torch.__version__}, {props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB")


def median_ms(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


n_bytes = 2 * 2**30
src = torch.rand(n_bytes // 4, device=dev)
dst = torch.empty_like(src)
ms = median_ms(lambda: dst.copy_(src))
print(f"copy: {2 * n_bytes / ms / 1e6:.0f} GB/s (read + write, {n_bytes / 2**30:.0f} GiB)")
del src, dst

print("| size | torch fp32 GFLOP/s | torch tf32 GFLOP/s |")
print("|---|---|---|")
for n in (1024, 2048, 4096, 8192):
    a = torch.rand(n, n, device=dev) * 2 - 1
    b = torch.rand(n, n, device=dev) * 2 - 1
    out = {}
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        ms = median_ms(lambda: torch.mm(a, b))
        out[tf32] = 2 * n**3 / ms / 1e6
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"| {n}³ | {out[False]:.0f} | {out[True]:.0f} |")
