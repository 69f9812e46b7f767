"""How far does data parallelism scale? The model's epoch time of 8.4's LeNet and 8.5's ResNet-18
on 1..16 devices, with the chapter's allreduce (everything through device 0) and with a ring.

    python benchmarks/scaling.py [--devices 1,2,4,8,16] [--profile book-gpu|here|FILE] [--out DIR]

Each point records the chapter's workload for one epoch of Fashion-MNIST's 60000 images (the
data is never made: the recorder has no values) and simulates it. LeNet keeps the book's total
batch of 256 on every device count (strong scaling, as 8.4); ResNet-18 gives each device 256
images a batch (as 8.5 doubles the batch for two GPUs). Either way an epoch is the same 60000
images, so efficiency is T(1) / (k T(k)): the fraction of a perfect k-fold speedup. The profile
"book-gpu" is the book's GPU machine (`asyncsim.lab.presets`); "here" is this machine's
calibrated profile, on CPU devices (`nd.cpu(i)`, one worker each). Prints a table
with the seconds each prediction took, and with --out draws epoch time and efficiency against
devices (PNG + SVG).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

import asyncsim
from asyncsim.lab import scenarios

NETWORKS = {"lenet": ("lenet_1gpu", 256, False), "resnet18": ("resnet18_1gpu", 256, True)}


def predict_epoch(network: str, devices: int, kvstore: str, profile, kind: str) -> tuple:
    """(epoch seconds, seconds the prediction took) for `network` on `devices` devices."""
    name, batch, per_device = NETWORKS[network]
    scenario = scenarios.get(name)
    params = dict(num_devices=devices, epochs=1, devices=kind, kvstore=kvstore,
                  batch_size=batch * devices if per_device else batch, num_test=batch)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the workload's own prints
        program = scenario.record(**params)
    trace = asyncsim.simulate(program, profile.replace(gpus=max(profile.gpus, devices)))
    return trace.regions["epoch 1"], time.perf_counter() - start


def _profile(spec: str):
    if spec == "here":
        from realexec.calibration.calibrate import calibrate

        return calibrate(workers=1), "cpu"
    if spec.endswith(".json"):
        return asyncsim.Profile.load(spec), "gpu"
    return asyncsim.Profile.preset(spec), "gpu"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2,4,8,16")
    parser.add_argument("--profile", default="book-gpu")
    parser.add_argument("--networks", default="lenet,resnet18")
    parser.add_argument("--out", default=None, help="a folder for the figure")
    args = parser.parse_args(argv)
    counts = [int(k) for k in args.devices.split(",")]
    profile, kind = _profile(args.profile)
    rows = []
    print(f"profile {profile.name}, {kind} devices; epoch seconds (efficiency), prediction time")
    for network in args.networks.split(","):
        for kvstore in ("device", "ring"):
            base = None
            for k in counts:
                epoch, took = predict_epoch(network, k, kvstore, profile, kind)
                base = epoch if base is None else base
                efficiency = base / (k * epoch) if counts[0] == 1 else float("nan")
                rows.append((network, kvstore, k, epoch, efficiency, took))
                print(f"  {network:9} {kvstore:7} {k:3} devices  {epoch:9.3f} s  "
                      f"({efficiency:5.2f})   predicted in {took:5.1f} s", flush=True)
    if args.out:
        _figure(rows, profile.name, Path(args.out))
    return 0


def _figure(rows, profile: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    time_ax, eff_ax = fig.subplots(1, 2)
    for network in dict.fromkeys(r[0] for r in rows):
        for kvstore, style in (("device", "-o"), ("ring", "--s")):
            pts = [r for r in rows if r[0] == network and r[1] == kvstore]
            label = f"{network}, {'through device 0' if kvstore == 'device' else 'ring'}"
            time_ax.plot([r[2] for r in pts], [r[3] for r in pts], style, label=label)
            eff_ax.plot([r[2] for r in pts], [r[4] for r in pts], style, label=label)
    for ax in (time_ax, eff_ax):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("devices")
    time_ax.set_yscale("log")
    time_ax.set_ylabel("predicted epoch time (s)")
    eff_ax.set_ylabel("efficiency T(1) / (k T(k))")
    eff_ax.set_ylim(0, 1.1)
    time_ax.legend(fontsize=8)
    fig.suptitle(f"Data parallelism, predicted with profile {profile}")
    out.mkdir(parents=True, exist_ok=True)
    for suffix in ("png", "svg"):
        fig.savefig(out / f"scaling-{profile}.{suffix}", dpi=120)
    print(f"wrote {out / f'scaling-{profile}.png'}")


if __name__ == "__main__":
    sys.exit(main())
