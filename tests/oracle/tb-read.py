"""TensorBoard's own reader (EventAccumulator, from the `tensorboard` package) over an
event-file folder: every scalar as {tag: [[step, value], ...]} in JSON on stdout. The
tests set what tp-train wrote against it (tests/it/tensorboard.rs)."""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps({t: [[e.step, e.value] for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}))
