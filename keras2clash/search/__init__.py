"""Co-design search: the network and its hardware evolved together.

A search description (`description`: YAML or JSON, validated) names the space of networks
(templates with a base design), of hardware (formats, processing elements and cycles, or a
multiplier budget the balanced allocator fills, pipeline levels), the data and training
budget, the constraints and the goals. `space` turns an optuna trial into a candidate,
`evaluate` trains it with Keras and measures it with the golden model (accuracy at its
formats) and the exact hardware model (cycles, multipliers, memory), `study` runs optuna's
NSGA-II sampler over a shared storage (SQLite by default; several worker processes, or
machines, on one storage URL), and `results` gives the table, the Pareto plot and `emit`.

Nothing here re-implements a genetic operator, a scheduler or a hardware figure: optuna
evolves and stores, `network.plan_network` plans, `hw.hwmodel` counts, `quant.golden`
computes what the hardware computes.
"""
