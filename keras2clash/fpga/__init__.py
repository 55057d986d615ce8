"""Place and route an emitted project on a real FPGA with the open tools (yosys + nextpnr).

- `devices`: the supported parts (resources, package pins, the tools and their arguments);
- `flow`: synthesis and place-and-route of a project's Verilog, logs kept in PROJECT/pnr/DEVICE/;
- `report`: the result record (utilisation, Fmax, critical path, latency in ns), markdown and JSON.
"""
