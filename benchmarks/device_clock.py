"""What the device-event clock costs the host per mark, on an accelerator.

On an accelerator every part boundary of a step (a *mark*) records a device event, so the
timeline's cost per step grows with the marks. This prints the host's time per mark for the
timeline on the host clock alone, with a new event per mark (create + record), and for the
pieces: creating an event, recording a new one, re-recording one already created.

    PYTHONPATH=src python benchmarks/device_clock.py [--steps 2000] [--parts 6]
"""

from __future__ import annotations

import argparse
import time

import torch

from torchdoctor.capture._timeline import StepTimeline


def per_mark_us(timeline: StepTimeline, steps: int, parts: int) -> float:
    names = [f"p{i}" for i in range(parts)]
    start = time.perf_counter_ns()
    for _ in range(steps):
        for name in names:
            timeline.push(name)
            timeline.pop(name)
        timeline.cut()
    return (time.perf_counter_ns() - start) / 1000 / (steps * (2 * parts + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--parts", type=int, default=6, help="parts opened and closed per step")
    args = parser.parse_args()
    host = per_mark_us(StepTimeline(), args.steps, args.parts)
    print(f"host clock only: {host:.2f} us per mark")
    if not (hasattr(torch, "accelerator") and torch.accelerator.is_available()):
        print("no accelerator here: nothing else to measure")
        return
    device = torch.accelerator.current_accelerator()
    torch.empty(1, device=device)  # the device's context, out of the figures

    def new_event():
        event = torch.Event(device=device, enable_timing=True)
        event.record()
        return event

    events = per_mark_us(StepTimeline(make_event=new_event), args.steps, args.parts)
    print(f"a new event per mark: {events:.2f} us per mark")
    n = args.steps * 4
    start = time.perf_counter_ns()
    made = [torch.Event(device=device, enable_timing=True) for _ in range(n)]
    create = (time.perf_counter_ns() - start) / 1000 / n
    start = time.perf_counter_ns()
    for event in made:
        event.record()
    first = (time.perf_counter_ns() - start) / 1000 / n
    start = time.perf_counter_ns()
    for event in made:
        event.record()
    again = (time.perf_counter_ns() - start) / 1000 / n
    torch.accelerator.synchronize()
    start = time.perf_counter_ns()
    del made
    destroy = (time.perf_counter_ns() - start) / 1000 / n
    print(f"torch.Event(): {create:.2f} us; first record (creates the device's event): "
          f"{first:.2f} us; record again: {again:.2f} us; destroying one: {destroy:.2f} us")  # fmt: skip


if __name__ == "__main__":
    main()
