"""PyTorch's NCCL backend through whatever libnccl the process has: run under torchrun, once plainly and once with
LD_PRELOAD=libweft_nccl.so, and compare the two result files (docs/nccl.md).

    python3 -m torch.distributed.run --nproc_per_node 2 test/nccl/torch_allreduce.py OUT_PREFIX
"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    prefix = sys.argv[1]
    dist.init_process_group("nccl")
    rank, size = dist.get_rank(), dist.get_world_size()
    # Every rank on the one GPU of the machine when there are fewer GPUs than ranks (they share it under MPS).
    torch.cuda.set_device(rank % torch.cuda.device_count())
    results = []
    wrong = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
        for count in (1, 1000, 65536 + 3, 1 << 20):
            base = torch.arange(count, device="cuda", dtype=torch.float32) % 13
            x = (base + rank).to(dtype)
            dist.all_reduce(x)
            # Small integers: the sum is exact in every type, so any rank order gives the same answer.
            expected = (base * size + size * (size - 1) / 2).to(dtype)
            bad = int((x != expected).sum().item())
            wrong += bad
            results.append(f"{dtype} {count} sum={float(x.double().sum().item())} wrong={bad}")
    t = torch.full((4096,), float(rank + 1), device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    results.append(f"max {float(t[0].item())}")
    gathered = [torch.empty(8, device="cuda") for _ in range(size)]
    dist.all_gather(gathered, torch.full((8,), float(rank), device="cuda"))
    results.append("allgather " + " ".join(str(float(g[0].item())) for g in gathered))
    torch.cuda.synchronize()
    with open(f"{prefix}.rank{rank}.txt", "w") as f:
        f.write("\n".join(results) + "\n")
    print(f"rank {rank}: {len(results)} results, {wrong} wrong elements", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
