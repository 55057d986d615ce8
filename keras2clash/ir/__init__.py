"""The IR: typed layer records (`layers`), the graph that joins them by named tensors
(`graph`), the passes that simplify it (`passes`) and its chain/branch structure as the
hardware builds it (`structure`)."""

from keras2clash.ir.graph import Graph, as_graph

__all__ = ["Graph", "as_graph"]
