"""gloo_allreduce.py K - torch.distributed all-reduce (gloo backend, CPU) among
K local processes, 1-64 MB of float32, timed like multiworker_bench.lua:
prints "K MB seconds busbw_GBps" lines."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, k, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=k)
    for mb in (1, 4, 16, 64):
        t = torch.ones(mb * 1048576 // 4)
        for _ in range(2):
            dist.all_reduce(t)
        reps = max(4, 192 // mb)
        best = float("inf")
        for _ in range(3):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                dist.all_reduce(t)
            best = min(best, (time.perf_counter() - t0) / reps)
        if rank == 0:
            print(f"{k} {mb} {best:.6f} {2 * (k - 1) / k * mb * 1048576 / best / 1e9:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    import socket
    k = int(sys.argv[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(k, port), nprocs=k)
