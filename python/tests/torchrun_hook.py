"""Run by torchrun (test_torchrun.py): the torch-transport hook with the process
group torchrun's environment describes (env://). Each rank writes its parameters
after training to OUT/rankN.pt."""

import gc
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ddp_workers as W  # noqa: E402
import gccl.torch as gt  # noqa: E402

torch.set_num_threads(1)
dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from torchrun
rank = dist.get_rank()
results = {}
for spec in ["uniform:bits=8", "topk:ratio=0.01"]:
    model = W.make_ddp(0)
    state = gt.GcclHookState(spec, min_compress_numel=64)
    model.register_comm_hook(state, gt.gccl_hook)
    W.train(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), rank, 4)
    results[spec] = W.flat(model)
    state.close()
del model
gc.collect()
torch.save(results, os.path.join(sys.argv[1], "rank%d.pt" % rank))
dist.destroy_process_group()
