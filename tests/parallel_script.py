"""A single-GPU training script for the fsdp2=N / ddp=N what-if knobs
(tests/simulate/test_simulate_parallel_knobs.py, tests/planning/test_plan_parallel.py),
whose figures are worked out there: a two-layer MLP, AdamW, two steps."""

SCRIPT = """
import argparse, json, torch
p = argparse.ArgumentParser()
p.add_argument("out"); p.add_argument("--groups", action="store_true")
p.add_argument("--late-cuda", action="store_true")
args = p.parse_args()
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
if not args.late_cuda:
    model = model.cuda()
marks = {"model": torch.cuda.memory_allocated()}
if args.groups:  # weight decay on the weights only, as fine-tuning scripts do
    params = [{"params": [model[0].weight, model[2].weight], "weight_decay": 0.1},
              {"params": [model[0].bias, model[2].bias], "weight_decay": 0.0}]
else:
    params = model.parameters()
opt = torch.optim.AdamW(params, foreach=False)
if args.late_cuda:
    model = model.cuda()
marks["optimizer"] = torch.cuda.memory_allocated()
for step in range(2):
    x = torch.randn(8, 256, device="cuda")
    loss = model(x).sum()
    marks[f"forward{step}"] = torch.cuda.memory_allocated()
    loss.backward()
    marks[f"backward{step}"] = torch.cuda.memory_allocated()
    opt.step()
    marks[f"step{step}"] = torch.cuda.memory_allocated()
    opt.zero_grad()
    marks[f"zero_grad{step}"] = torch.cuda.memory_allocated()
    del x, loss
marks["class"] = type(model).__name__
json.dump(marks, open(args.out, "w"))
"""
